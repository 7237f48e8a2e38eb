// Command worker is the receiving half of localcloud's example: it handles
// the orders that examples/producer sends, four at a time, and prints each
// one. It stops on Ctrl-C (SIGINT) or SIGTERM after finishing the orders in
// hand.
//
// From the repository root, one command per terminal:
//
//	localcloud up -f examples/stack.yaml   # after scripts/install.sh
//	localcloud run -f examples/stack.yaml -- go run ./examples/worker
//	localcloud run -f examples/stack.yaml -- go run ./examples/producer -n 20
//
// With localcloud up running, an order is picked up the moment it is sent
// (a wake-up hint over NATS); without it, within about a second (the
// fallback poll).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/localcloud/localcloud/bindings/queue"
)

// Order is what examples/producer sends.
type Order struct {
	ID    int    `json:"id"`
	Item  string `json:"item"`
	Qty   int    `json:"qty"`
	Buyer string `json:"buyer"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	orders, err := queue.FromEnv(ctx, "orders")
	if err != nil {
		return err
	}
	defer orders.Close()
	fmt.Println("worker: waiting for orders (Ctrl-C to stop)")

	// Returning nil acks the order; an error would put it back for another
	// attempt.
	handle := func(ctx context.Context, m queue.Message) error {
		var o Order
		if err := m.Payload.Decode(&o); err != nil {
			return err
		}
		fmt.Printf("order %d: %d x %s for %s (attempt %d)\n", o.ID, o.Qty, o.Item, o.Buyer, m.Attempt)
		return nil
	}
	// Consume returns when ctx ends, after the handlers in flight are done.
	if err := orders.Consume(ctx, handle, queue.ConsumeWorkers(4)); err != nil {
		return err
	}
	fmt.Println("worker: stopped")
	return nil
}
