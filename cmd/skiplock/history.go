package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock"
)

func newHistoryCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history export|import",
		Short: "Export finished jobs to files before retention drops them, and bring a file back",
		Long: `Finished jobs (jobs_done) are kept for --completed-retention and then dropped a day at a time.
'history export' writes each finished UTC day to a directory as gzip-compressed NDJSON (one job
per line, every column, payload included) with a manifest.json of row counts, id ranges and
sha256 checksums; it resumes where a previous run stopped. 'work --history-export-dir DIR' does
the same automatically before each drop, and keeps a day whose export failed.
'history import' brings a file back into the history for investigation.`,
	}
	cmd.AddCommand(newHistoryExportCmd(g), newHistoryImportCmd(g))
	return cmd
}

func newHistoryExportCmd(g *globals) *cobra.Command {
	var to, format string
	var force bool
	cmd := &cobra.Command{
		Use:   "export --to DIR [--format ndjson|parquet] [--force]",
		Short: "Write every finished day of jobs_done to DIR (NDJSON.gz, one file a day, and a manifest)",
		Long: `Writes every UTC day of the history that has ended (today's is left for later) to DIR as
jobs_done_YYYYMMDD.ndjson.gz, and records each file in DIR/manifest.json (day range, rows, id
range, sha256, bytes). A day the manifest lists whose file still matches its checksum is skipped,
so an interrupted export resumes; --force writes every day again. --format parquet writes
jobs_done_YYYYMMDD.parquet instead (zstd, one typed column per column). Files hold payloads: store
them as you store the database. Only directories: bucket URLs (gocloud.dev/blob) are not supported.`,
		Example: `  skiplock history export --to /backup/skiplock-history
  skiplock history export --to /backup/skiplock-history --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return usageError("--to: the export directory is required")
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
				Format: skiplock.HistoryFormat(format)})
			if g.jsonOut && err == nil {
				return printJSON(cmd.OutOrStdout(), struct {
					Files []skiplock.HistoryFile `json:"files"`
				}{files})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "FILE\tROWS\tIDS\tBYTES\tWRITTEN")
			for _, f := range files {
				written := "yes"
				if f.Resumed {
					written = "no (already exported)"
				}
				fmt.Fprintf(tw, "%s\t%d\t%d-%d\t%d\t%s\n", f.Name, f.Rows, f.MinID, f.MaxID, f.Bytes, written)
			}
			if ferr := tw.Flush(); err == nil {
				err = ferr
			}
			return err
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the export directory (created if missing)")
	cmd.Flags().BoolVar(&force, "force", false, "write every day again, even those already exported")
	cmd.Flags().StringVar(&format, "format", "ndjson", "file format: ndjson (gzip) or parquet")
	g.addJSON(cmd)
	return cmd
}

func newHistoryImportCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Bring an exported day back into the history (job get finds its jobs again)",
		Long: `Inserts the jobs of an exported file back into jobs_done, where 'job get' and 'job list'
find them until retention drops their day again. The file's checksum is verified against the
manifest.json beside it, when there is one; a job already in the history is not inserted twice.`,
		Example: `  skiplock history import /backup/skiplock-history/jobs_done_20261127.ndjson.gz`,
		Args:    cobra.ArbitraryArgs,
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
