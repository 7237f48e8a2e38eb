// Command producer is the sending half of localcloud's example: it puts a
// cart into the carts KV store and sends orders, as JSON, to the orders
// queue of examples/stack.yaml. Run examples/worker to see them handled.
//
// From the repository root, one command per terminal:
//
//	localcloud up -f examples/stack.yaml   # after scripts/install.sh
//	localcloud run -f examples/stack.yaml -- go run ./examples/worker
//	localcloud run -f examples/stack.yaml -- go run ./examples/producer -n 20
//
// localcloud run hands the program the stack's environment; kv.FromEnv and
// queue.FromEnv find their stores (and the wake-up hint server) in it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
)

// Order is what goes into the orders queue.
type Order struct {
	ID    int    `json:"id"`
	Item  string `json:"item"`
	Qty   int    `json:"qty"`
	Buyer string `json:"buyer"`
}

func main() {
	n := flag.Int("n", 10, "number of orders to send")
	flag.Parse()
	if err := run(context.Background(), *n); err != nil {
		fmt.Fprintln(os.Stderr, "producer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, n int) error {
	carts, err := kv.FromEnv(ctx, "carts")
	if err != nil {
		return err
	}
	defer carts.Close()
	cart, err := json.Marshal(map[string]int{"tea": 2, "mug": 1})
	if err != nil {
		return err
	}
	if _, err := carts.Put(ctx, "cart:alice", cart); err != nil {
		return err
	}

	orders, err := queue.FromEnv(ctx, "orders")
	if err != nil {
		return err
	}
	defer orders.Close() // also sends the last wake-up hint
	items := []string{"tea", "mug", "kettle", "biscuits"}
	for i := 1; i <= n; i++ {
		o := Order{ID: i, Item: items[i%len(items)], Qty: 1 + i%3, Buyer: "alice"}
		if err := orders.Send(ctx, queue.JSON(o)); err != nil {
			return fmt.Errorf("send order %d: %w", i, err)
		}
	}
	fmt.Printf("put cart:alice; sent %d orders\n", n)
	return nil
}
