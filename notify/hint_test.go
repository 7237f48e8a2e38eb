package notify

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestSubject(t *testing.T) {
	t.Parallel()
	if got := Subject("shop", "orders"); got != "localcloud.shop.orders.available" {
		t.Fatalf("Subject = %q", got)
	}
	stack, binding, ok := ParseSubject("localcloud.shop.orders.available")
	if !ok || stack != "shop" || binding != "orders" {
		t.Fatalf("ParseSubject = %q %q %v", stack, binding, ok)
	}
	for _, bad := range []string{"", "localcloud.shop.orders", "x.shop.orders.available", "localcloud.shop.orders.gone",
		"localcloud..orders.available", "localcloud.shop.a.b.available"} {
		if _, _, ok := ParseSubject(bad); ok {
			t.Errorf("ParseSubject(%q) ok", bad)
		}
	}
}

func TestCheckName(t *testing.T) {
	t.Parallel()
	for _, good := range []string{"orders", "Orders_2", "a-b"} {
		if err := CheckName(good); err != nil {
			t.Errorf("CheckName(%q) = %v", good, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a b", "a*", ">", "ä", "a/b"} {
		if err := CheckName(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("CheckName(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
}

func TestHintJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	data, err := json.Marshal(Hint{Binding: "orders", Due: DueUnknown, At: at.UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != `{"binding":"orders","due":-1,"at":1767225600000}` {
		t.Fatalf("hint JSON = %s", data)
	}
	h, err := ParseHint([]byte(`{"binding":"orders","due":3,"at":1767225600000,"future":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if h.Binding != "orders" || h.Due != 3 || !h.Time().Equal(at) {
		t.Fatalf("ParseHint = %+v", h)
	}
	if _, err := ParseHint([]byte("not json")); err == nil {
		t.Fatal("ParseHint accepted garbage")
	}
}
