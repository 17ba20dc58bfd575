package importer_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/dbtest"
	"github.com/skiplock/skiplock/internal/importer"
)

// The worked port of docs/coming-from-asynq.md: a small asynq service
// (resize images on a weighted "critical" queue, at most one resize per
// image in flight, and blobs whose payload is raw bytes) written against
// skiplock, compiled and run here. TestGuidesShowThePorts checks the guide
// shows this code verbatim.

// docs:asynq-service
// ResizeImage was the JSON payload of asynq.NewTask("image:resize", b).
type ResizeImage struct {
	ImageID string `json:"image_id"`
	Width   int    `json:"width"`
}

func (ResizeImage) Kind() string { return "image:resize" }

// StoreBlob reads a task whose payload was raw bytes: the import carries
// them as {"$asynq_bytes": "<base64>"}, which encoding/json decodes into a
// []byte.
type StoreBlob struct {
	Bytes []byte `json:"$asynq_bytes"`
}

// Images resizes and stores (a fake in tests).
type Images interface {
	Resize(ctx context.Context, imageID string, width int) error
	Store(ctx context.Context, blob []byte) error
}

// NewImageClient was asynq.NewServer(redis, asynq.Config{Queues:
// map[string]int{"critical": 6, "default": 3, "low": 1}}): a worker pool per
// queue, sized by its weight. Pools are independent: "low" keeps its worker
// however full "critical" is.
func NewImageClient(pool *pgxpool.Pool) (*skiplock.Client, error) {
	return skiplock.NewClient(pool, skiplock.Config{Pools: []skiplock.WorkerPool{
		{Queues: []string{"critical"}, Concurrency: 6},
		{Queues: []string{"default"}, Concurrency: 3},
		{Queues: []string{"low"}, Concurrency: 1},
	}})
}

// RegisterHandlers was mux.HandleFunc("image:resize", ...) on an
// asynq.ServeMux: json.Unmarshal(t.Payload(), &p) is done for you.
func RegisterHandlers(client *skiplock.Client, img Images) error {
	err := skiplock.HandleArgs(client, func(ctx context.Context, job *skiplock.Job[ResizeImage]) error {
		return img.Resize(ctx, job.Args.ImageID, job.Args.Width)
	}, skiplock.WithTimeout(2*time.Minute)) // asynq.Timeout(2*time.Minute)
	if err != nil {
		return err
	}
	return skiplock.Handle(client, "blob:store", func(ctx context.Context, job *skiplock.Job[StoreBlob]) error {
		return img.Store(ctx, job.Args.Bytes)
	})
}

// EnqueueResize was client.Enqueue(asynq.NewTask("image:resize", b),
// asynq.Queue("critical"), asynq.MaxRetry(3), asynq.ProcessIn(delay),
// asynq.TaskID("resize:"+imageID)). MaxRetry counts retries, MaxAttempts
// attempts: 3 retries are 4 attempts. The unique key refuses a second
// resize of the image while one waits or runs (asynq's TaskID refused it
// for as long as the task was kept).
func EnqueueResize(ctx context.Context, client *skiplock.Client, imageID string, width int, delay time.Duration) (bool, error) {
	res, err := client.Enqueue(ctx, skiplock.EnqueueParams{
		Queue: "critical", Payload: ResizeImage{ImageID: imageID, Width: width},
		MaxAttempts: 4, Delay: delay, UniqueKey: "resize:" + imageID,
	})
	return res.Inserted, err
}

// docs:end

type fakeImages struct {
	mu      sync.Mutex
	resized []string
	blobs   [][]byte
	done    chan struct{}
}

func (f *fakeImages) Resize(_ context.Context, id string, _ int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resized = append(f.resized, id)
	f.check()
	return nil
}

func (f *fakeImages) Store(_ context.Context, b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blobs = append(f.blobs, b)
	f.check()
	return nil
}

func (f *fakeImages) check() {
	if len(f.resized) == 1 && len(f.blobs) == 1 {
		close(f.done)
	}
}

// TestAsynqPort runs the ported service: a resize (its duplicate refused)
// and a blob as the import would have carried it from asynq.
func TestAsynqPort(t *testing.T) {
	ctx := context.Background()
	db := dbtest.New(t)
	client, err := NewImageClient(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	img := &fakeImages{done: make(chan struct{})}
	if err := RegisterHandlers(client, img); err != nil {
		t.Fatal(err)
	}
	if ok, err := EnqueueResize(ctx, client, "img-1", 640, 0); err != nil || !ok {
		t.Fatalf("resize: %v, %v", ok, err)
	}
	if ok, err := EnqueueResize(ctx, client, "img-1", 640, 0); err != nil || ok {
		t.Fatalf("duplicate resize: inserted %v, %v", ok, err)
	}
	raw := []byte{0x89, 'P', 'N', 'G', 0x00}
	if _, err := client.Enqueue(ctx, skiplock.EnqueueParams{Queue: "low", Kind: "blob:store", Payload: importer.AsynqPayload(raw)}); err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Stop(ctx) }()
	select {
	case <-img.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the service did not resize and store within 20 s")
	}
	img.mu.Lock()
	defer img.mu.Unlock()
	if !bytes.Equal(img.blobs[0], raw) {
		t.Fatalf("blob: got %x, want %x", img.blobs[0], raw)
	}
}
