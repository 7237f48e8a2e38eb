// Package checkout is the app code of localcloud's localcloudtest example:
// it turns a cart of the "carts" KV binding into an order on the "orders"
// queue, finding both stores the way every localcloud app does, with
// kv.FromEnv and queue.FromEnv. checkout_test.go tests it against a whole
// stack (examples/stack.yaml) started in process by localcloudtest.Start.
package checkout

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
)

// Order is the message Checkout sends.
type Order struct {
	Cart  string   `json:"cart"`
	Items []string `json:"items"`
}

// Checkout reads the cart cartID (a JSON list of items), sends it as an
// Order to "orders" and deletes the cart.
func Checkout(ctx context.Context, cartID string) error {
	carts, err := kv.FromEnv(ctx, "carts")
	if err != nil {
		return err
	}
	defer carts.Close()
	orders, err := queue.FromEnv(ctx, "orders")
	if err != nil {
		return err
	}
	defer orders.Close()

	raw, ok, err := carts.Get(ctx, cartID)
	if err != nil {
		return fmt.Errorf("read cart %s: %w", cartID, err)
	}
	if !ok {
		return fmt.Errorf("read cart %s: no such cart", cartID)
	}
	var items []string
	if err := json.Unmarshal(raw, &items); err != nil {
		return fmt.Errorf("decode cart %s: %w", cartID, err)
	}
	if err := orders.Send(ctx, queue.JSON(Order{Cart: cartID, Items: items})); err != nil {
		return fmt.Errorf("send order for cart %s: %w", cartID, err)
	}
	if err := carts.Delete(ctx, cartID); err != nil {
		return fmt.Errorf("delete cart %s: %w", cartID, err)
	}
	return nil
}
