package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
)

func newRolesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "roles",
		Short: "Give database roles what one component needs and no more (grant)",
	}
	cmd.AddCommand(newRolesGrantCmd(g))
	return cmd
}

func newRolesGrantCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "grant producer|worker|reader|admin ROLE",
		Short: "Grant an existing database role the privileges of one kind of component",
		Long: `Grants the existing database ROLE what one component needs in the schema, and prints
the SQL statements it ran (it calls the SQL function skiplock.grant_role). Connect as the
schema's owner. Run it again after an upgrade that adds a table.

  producer  enqueue and signal through the functions (skiplock.enqueue, skiplock.signal,
            the Go API's Enqueue); no privilege on any table
  worker    run jobs and the maintenance every started client runs
  reader    read everything but payloads and outputs (the dashboard's --read-only, stats)
  admin     every CLI and dashboard action

No kind can change the limits (only the owner can) or the schema. docs/security.md says
what each can do and how to run each component with its role.`,
		Example: `  skiplock roles grant producer checkout_service
  skiplock roles grant worker skiplock_worker`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind := skiplock.RoleKind(args[0])
			switch kind {
			case skiplock.RoleProducer, skiplock.RoleWorker, skiplock.RoleReader, skiplock.RoleAdmin:
			default:
				return usageError("KIND: must be producer, worker, reader or admin, got %q", termSafe(args[0]))
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			stmts, err := c.RoleGrant(cmd.Context(), kind, args[1])
			var fe *skiplock.FieldError
			if errors.As(err, &fe) {
				return usageError("%s: %s", fe.Field, termSafe(fe.Message))
			}
			if err != nil {
				return err
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), map[string]any{"kind": kind, "role": args[1], "statements": stmts})
			}
			for _, s := range stmts {
				fmt.Fprintf(cmd.OutOrStdout(), "%s;\n", termSafe(s))
			}
			return nil
		},
	}
	g.addJSON(cmd)
	return cmd
}
