package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
)

func init() { register(newQueueCmd) }

func newQueueCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue pause|resume Q",
		Short: "Pause or resume a queue in every worker process",
	}
	cmd.AddCommand(newQueuePauseCmd(true), newQueuePauseCmd(false))
	return cmd
}

func newQueuePauseCmd(pause bool) *cobra.Command {
	use, short := "resume QUEUE", "Let every process claim from the queue again"
	if pause {
		use, short = "pause QUEUE", "Stop every process from claiming from the queue (running jobs finish)"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `.
The flag is stored in the database: every worker honours it from its next claim, within
one poll interval. Jobs can still be enqueued into a paused queue.`,
		Args: oneName("QUEUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			queue := args[0]
			v, err := validatingClient(cmd.Context())
			if err != nil {
				return err
			}
			err = v.Validate(skiplock.EnqueueParams{Queue: queue, Kind: "x"})
			v.Pool().Close()
			if err != nil {
				return queueUsage(err)
			}
			c, closePool, err := clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			if pause {
				err = c.PauseQueue(cmd.Context(), queue)
			} else {
				err = c.ResumeQueue(cmd.Context(), queue)
			}
			if err != nil {
				return queueUsage(err)
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), map[string]any{"queue": queue, "paused": pause})
			}
			state := "resumed"
			if pause {
				state = "paused"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "queue %s %s\n", queue, state)
			return nil
		},
	}
	addJSON(cmd)
	return cmd
}

func queueUsage(err error) error {
	var fe *skiplock.FieldError
	if errors.As(err, &fe) {
		return usageError("QUEUE: %s", fe.Message)
	}
	return err
}
