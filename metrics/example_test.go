package metrics_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiplock/skiplock/metrics"
)

// Serve skiplock's metrics, with the Go runtime and process metrics, at
// /metrics of your own server.
func ExampleHandler() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(pool, "skiplock"))
	log.Fatal(http.ListenAndServe("127.0.0.1:9100", mux))
}

// Add skiplock's metrics to a registry you already serve.
func ExampleNewCollector() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	prometheus.MustRegister(metrics.NewCollector(pool, "skiplock"))
}
