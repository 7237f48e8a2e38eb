package kv_test

import "context"

var ctx = context.Background()
