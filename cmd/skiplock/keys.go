package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
)

// addEncryptionKeys adds --encryption-keys (default
// $SKIPLOCK_ENCRYPTION_KEYS) to a command whose client seals or opens
// payloads (docs/security.md "Payload encryption").
func (g *globals) addEncryptionKeys(cmd *cobra.Command) {
	cmd.Flags().StringVar(&g.encryptionKeys, "encryption-keys", g.envOr("SKIPLOCK_ENCRYPTION_KEYS", ""),
		"keyring file (skiplock keys new): seal the payloads enqueued, open the sealed ones run (default $SKIPLOCK_ENCRYPTION_KEYS)")
}

// keyring loads the --encryption-keys file; nil when none is named.
func (g *globals) keyring() (*skiplock.Keyring, error) {
	if g.encryptionKeys == "" {
		return nil, nil
	}
	k, err := skiplock.LoadKeyring(g.encryptionKeys)
	if err != nil {
		return nil, usageError("--encryption-keys (or SKIPLOCK_ENCRYPTION_KEYS): %v", err)
	}
	return k, nil
}

func newKeysCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Make and rotate the keyring that seals payloads at rest (new, rotate)",
	}
	cmd.AddCommand(newKeysNewCmd(g), newKeysRotateCmd(g))
	return cmd
}

func newKeysNewCmd(g *globals) *cobra.Command {
	var file, tenant string
	cmd := &cobra.Command{
		Use:   "new --file F [--tenant T]",
		Short: "Make a keyring file, or add a new key to one",
		Long: `Adds a new random AES-256 key to the keyring file F (creating it, mode 0600) and prints
its id. Without --tenant the key becomes the current one: jobs enqueued from now on are
sealed with it, and the older keys stay in the file so that jobs sealed before still open
(` + "`skiplock keys rotate`" + ` re-seals them). With --tenant the key becomes that tenant's: deleting
it from the file later makes the tenant's sealed jobs unreadable (crypto-shredding).
Give the file to enqueue and work with --encryption-keys or SKIPLOCK_ENCRYPTION_KEYS.`,
		Example: `  skiplock keys new --file /etc/skiplock/keys.json
  skiplock keys new --file /etc/skiplock/keys.json --tenant acme`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageError("--file: required")
			}
			id, err := skiplock.KeyringAddKey(file, tenant)
			var fe *skiplock.FieldError
			if errors.As(err, &fe) {
				return usageError("--%s: %s", fe.Field, termSafe(fe.Message))
			}
			if err != nil {
				return err
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), map[string]any{"file": file, "key_id": id, "tenant": tenant})
			}
			fmt.Fprintln(cmd.OutOrStdout(), id)
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "the keyring file (created if missing)")
	cmd.Flags().StringVar(&tenant, "tenant", "", "make the key this tenant's instead of the current one")
	g.addJSON(cmd)
	return cmd
}

func newKeysRotateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rotate --encryption-keys F",
		Short: "Re-seal ready jobs and dead letters sealed under an older key with the key their tenant has now",
		Long: `Re-seals the payload of every ready job (due or scheduled) and every dead letter that was
sealed under a key other than the one the keyring now gives its tenant (the tenant's key,
else the current key), in batches of 500 row-locked rows, and prints how many. Running jobs
keep their envelope (their worker opens it with the older key); the finished-job history is
left as it is. Before deleting a key from the file,
run this once the jobs that were running have finished, and check that no job names it
(docs/security.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := g.keyring()
			if err != nil {
				return err
			}
			if k == nil {
				return usageError("--encryption-keys (or SKIPLOCK_ENCRYPTION_KEYS): required")
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			n, err := c.KeysRotate(cmd.Context())
			if err != nil {
				return err
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), map[string]any{"resealed": n, "current": k.Current()})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "re-sealed %d jobs (current key %s)\n", n, k.Current())
			return nil
		},
	}
	g.addEncryptionKeys(cmd)
	g.addJSON(cmd)
	return cmd
}
