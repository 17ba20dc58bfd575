package main

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
)

func newHistoryCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history export|import",
		Short: "Export finished jobs and dead letters to files before retention removes them, and bring a file back",
		Long: `Finished jobs (jobs_done) are kept for --completed-retention and then dropped a day at a time;
dead letters are kept for --dead-letter-retention. 'history export' writes each finished UTC day
to a directory or a bucket (file://, s3://) as gzip-compressed NDJSON (one job
per line, every column, payload included) with a manifest.json of row counts, id ranges and
sha256 checksums; it resumes where a previous run stopped; --dead-letters exports the dead
letters too. 'work --history-export-dir DIR|URL' does the same automatically before each drop
and each purge of dead letters, and keeps a day whose export failed. 'history import' brings a
file back for investigation.`,
	}
	cmd.AddCommand(newHistoryExportCmd(g), newHistoryImportCmd(g))
	return cmd
}

func newHistoryExportCmd(g *globals) *cobra.Command {
	var to, format string
	var force, dead bool
	cmd := &cobra.Command{
		Use:   "export --to DIR|URL [--format ndjson|parquet] [--dead-letters] [--force]",
		Short: "Write every finished day of jobs_done (and of jobs_dead) to a directory or bucket, with a manifest",
		Long: `Writes every UTC day of the history that has ended (today's is left for later) as
jobs_done_YYYYMMDD.ndjson.gz, and records each file in manifest.json beside it (table, day range,
rows, id range, sha256, bytes). The manifest is written after each file, and a file appears whole
or not at all, so an interrupted export resumes: a day the manifest lists whose file still matches
its checksum is skipped; --force writes every day again. --format parquet writes
jobs_done_YYYYMMDD.parquet instead (zstd, one typed column per column). --dead-letters also writes
each ended day of dead letters as jobs_dead_YYYYMMDD.ndjson.gz (by the day they died; NDJSON
only). Nothing is removed from the database.

--to is a directory (created if missing) or a bucket URL: file:///path, s3://bucket/prefix
(?region=…, ?endpoint=… for S3-compatible stores; s3:// in the released CLI, or one built
with -tags skiplock_cloud).
A URL's path is a prefix inside the bucket. Credentials come from each cloud's usual environment
(AWS_* or ~/.aws, GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_ACCOUNT and its key or
identity), never from the URL. Files hold payloads: store them as you store the database.`,
		Example: `  skiplock history export --to /backup/skiplock-history
  skiplock history export --to s3://acme-archive/skiplock?region=eu-west-1 --dead-letters
  skiplock history export --to s3://acme-archive/skiplock?region=eu-west-1 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return usageError("--to: the destination (a directory or a bucket URL) is required")
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			if format != string(skiplock.HistoryFormatNDJSON) && format != string(skiplock.HistoryFormatParquet) {
				return usageError("--format: must be ndjson or parquet, got %q", format)
			}
			files, err := c.HistoryExport(cmd.Context(), skiplock.HistoryExportParams{Dir: to, Force: force,
				Format: skiplock.HistoryFormat(format), DeadLetters: dead})
			if fe := (*skiplock.FieldError)(nil); errors.As(err, &fe) && fe.Field == "Dir" {
				return usageError("--to: %s", fe.Message)
			}
			if g.jsonOut && err == nil {
				return printJSON(cmd.OutOrStdout(), struct {
					Files []skiplock.HistoryFile `json:"files"`
				}{files})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "FILE\tTABLE\tROWS\tIDS\tBYTES\tWRITTEN")
			for _, f := range files {
				written := "yes"
				if f.Resumed {
					written = "no (already exported)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d-%d\t%d\t%s\n", f.Name, f.Table, f.Rows, f.MinID, f.MaxID, f.Bytes, written)
			}
			if ferr := tw.Flush(); err == nil {
				err = ferr
			}
			return err
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the destination: a directory (created if missing) or a bucket URL (file://, s3://)")
	cmd.Flags().BoolVar(&force, "force", false, "write every day again, even those already exported")
	cmd.Flags().StringVar(&format, "format", "ndjson", "file format of finished jobs: ndjson (gzip) or parquet (dead letters: always ndjson)")
	cmd.Flags().BoolVar(&dead, "dead-letters", false, "export the dead letters too: one jobs_dead_YYYYMMDD.ndjson.gz a day they died")
	g.addJSON(cmd)
	return cmd
}

func newHistoryImportCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import FILE|URL",
		Short: "Bring an exported day back (job get finds its jobs again)",
		Long: `Inserts the jobs of an exported file back where they came from: a jobs_done_… file into the
history (jobs_done), where 'job get' and 'job list' find them until retention drops their day
again; a jobs_dead_… file into the dead letters (jobs_dead), where 'job get', 'dlq' and a replay
find them until retention purges their day again. FILE is a path or a bucket URL ending with the
file's name (as 'history export --to' takes). The file's checksum is verified against the
manifest.json beside it, when there is one, before any row is inserted; a job already there is
not inserted twice.`,
		Example: `  skiplock history import /backup/skiplock-history/jobs_done_20261127.ndjson.gz
  skiplock history import s3://acme-archive/skiplock/jobs_dead_20261127.ndjson.gz?region=eu-west-1`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError("FILE: exactly one file expected, got %d arguments", len(args))
			}
			c, closePool, err := g.clientForCLI(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			read, inserted, err := c.HistoryImport(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.jsonOut {
				return printJSON(cmd.OutOrStdout(), struct {
					Read     int64 `json:"read"`
					Inserted int64 `json:"inserted"`
				}{read, inserted})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%d job(s) read, %d inserted\n", read, inserted)
			return err
		},
	}
	g.addJSON(cmd)
	return cmd
}
