package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newFailoverCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "failover advance-tokens",
		Short: "Steps to run after a standby is promoted (see docs/operations.md, Failover)",
	}
	cmd.AddCommand(newAdvanceTokensCmd(g))
	return cmd
}

func newAdvanceTokensCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "advance-tokens",
		Short: "Move the lease-token sequence past anything the old primary handed out (run once on the new primary)",
		Long: `Move the lease-token sequence to the current time in microseconds (or a million past its own
value when that is higher: never backwards) and print
its new value ({"lease_tokens":N} with --json). Run it once on the new primary after a failover,
from the HA manager's post-promotion hook or by hand: after a failover to an asynchronous
standby, the new primary would otherwise hand out again the tokens of the commits it never
received, and a lease held on the old primary could pass the fence. Harmless after a failover
to a synchronous standby, and safe while workers run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			v, err := c.LeaseTokensAdvance(cmd.Context())
			if err != nil {
				return err
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), map[string]int64{"lease_tokens": v})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "lease tokens now start after %d\n", v)
			return nil
		},
	}
	g.addJSON(cmd)
	return cmd
}
