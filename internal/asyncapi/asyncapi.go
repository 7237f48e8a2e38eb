package asyncapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/localcloud/localcloud/notify"
)

// Format selects the encoding of AsyncAPI's output.
type Format string

// Output formats of AsyncAPI.
const (
	FormatJSON Format = "json" // indented JSON, the default
	FormatYAML Format = "yaml"
)

const (
	// DefaultAsyncAPIHost is the default of the document's host server variable.
	DefaultAsyncAPIHost = "127.0.0.1:4222"

	// DefaultAsyncAPIVersion is the default info.version: the version of the hint contract.
	DefaultAsyncAPIVersion = "1.0.0"

	asyncAPIServerID  = "localcloud"
	asyncAPIMessageID = "hint"
)

// Input describes the stack whose hint channels AsyncAPI documents.
type Input struct {
	StackName string   // required; must pass CheckName
	Title     string   // info.title. Defaults to "localcloud <stack> queue hints".
	Version   string   // info.version. Defaults to DefaultAsyncAPIVersion.
	Bindings  []string // queue binding names, each passing CheckName; sorted and deduplicated
	// DefaultHost is the default of the server's host variable. Defaults to
	// DefaultAsyncAPIHost.
	DefaultHost string
	// Format is FormatJSON or FormatYAML. Defaults to FormatJSON.
	Format Format
}

// Generate returns an AsyncAPI 3.0.0 document for a stack's hint channels: one channel per
// queue binding with address localcloud.<stack>.<binding>.available, the Hint payload schema,
// and a NATS server whose host is the variable {host}.
//
// AsyncAPI 3 operations are written from the point of view of the application a document
// describes. This document describes a participant on the stack's hint bus, so each channel has
// two operations: "<binding>.receive" is what a consuming application implements (subscribe,
// then read the queue), and "<binding>.send" is what localcloud itself does. Code generators
// for consumers should use the receive operations.
//
// The output is deterministic: keys are sorted and bindings are sorted and deduplicated.
func Generate(in Input) ([]byte, error) {
	if err := notify.CheckName(in.StackName); err != nil {
		return nil, fmt.Errorf("asyncapi: stack name: %w", err)
	}
	bindings := slices.Clone(in.Bindings)
	slices.Sort(bindings)
	bindings = slices.Compact(bindings)
	for _, b := range bindings {
		if err := notify.CheckName(b); err != nil {
			return nil, fmt.Errorf("asyncapi: binding name: %w", err)
		}
	}
	title := in.Title
	if title == "" {
		title = "localcloud " + in.StackName + " queue hints"
	}
	version := in.Version
	if version == "" {
		version = DefaultAsyncAPIVersion
	}
	host := in.DefaultHost
	if host == "" {
		host = DefaultAsyncAPIHost
	}

	channels := obj{}
	operations := obj{}
	serverRef := obj{"$ref": "#/servers/" + asyncAPIServerID}
	for _, b := range bindings {
		subject := notify.Subject(in.StackName, b)
		channels[b] = obj{
			"address": subject,
			"title":   "Queue " + b + ": message available",
			"description": "A hint that queue binding " + b + " may have a message to receive. " +
				"Hints carry no message data and can be lost: on a hint, receive from the queue; " +
				"keep polling as well.",
			"servers":  []any{serverRef},
			"messages": obj{asyncAPIMessageID: obj{"$ref": "#/components/messages/" + asyncAPIMessageID}},
		}
		channelRef := obj{"$ref": "#/channels/" + b}
		messageRefs := []any{obj{"$ref": "#/channels/" + b + "/messages/" + asyncAPIMessageID}}
		operations[b+".receive"] = obj{
			"action":   "receive",
			"channel":  channelRef,
			"messages": messageRefs,
			"summary":  "A consuming application receives hints for queue " + b + ".",
		}
		operations[b+".send"] = obj{
			"action":   "send",
			"channel":  channelRef,
			"messages": messageRefs,
			"summary":  "localcloud sends a hint when a message of queue " + b + " becomes due.",
		}
	}

	doc := obj{
		"asyncapi":           "3.0.0",
		"defaultContentType": "application/json",
		"info": obj{
			"title":   title,
			"version": version,
			"description": "Wake-up hints of localcloud stack " + in.StackName + ". A hint says " +
				"\"this queue may have a message now\"; the queue store is the truth. Hints are " +
				"at most once, coalesced (at most one per subject per few milliseconds, always " +
				"one after the last change) and may be lost, so consumers also poll.",
		},
		"servers": obj{
			asyncAPIServerID: obj{
				"host":     "{host}",
				"protocol": "nats",
				"description": "The NATS server embedded in `localcloud up`. It requires the " +
					"token from the stack configuration when one is set.",
				"variables": obj{
					"host": obj{
						"default":     host,
						"description": "host:port of the hint server, as printed by `localcloud up`.",
					},
				},
			},
		},
		"channels":   channels,
		"operations": operations,
		"components": obj{
			"messages": obj{
				asyncAPIMessageID: obj{
					"name":        asyncAPIMessageID,
					"title":       "Message available",
					"contentType": "application/json",
					"payload":     obj{"$ref": "#/components/schemas/" + asyncAPIMessageID},
					"examples": []any{obj{
						"name":    "due",
						"payload": obj{"binding": "orders", "due": 3, "at": 1767225600000},
					}},
				},
			},
			"schemas": obj{asyncAPIMessageID: hintSchema()},
		},
	}

	switch in.Format {
	case FormatJSON, "":
		out, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("asyncapi: encode json: %w", err)
		}
		return append(out, '\n'), nil
	case FormatYAML:
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2)
		if err := enc.Encode(doc); err != nil {
			return nil, fmt.Errorf("asyncapi: encode yaml: %w", err)
		}
		if err := enc.Close(); err != nil {
			return nil, fmt.Errorf("asyncapi: encode yaml: %w", err)
		}
		return buf.Bytes(), nil
	default:
		return nil, fmt.Errorf("asyncapi: unknown format %q (want %q or %q)", in.Format, FormatJSON, FormatYAML)
	}
}

// obj is a JSON object; encoding/json and yaml.v3 both write map keys sorted.
type obj = map[string]any

// hintSchema is the JSON schema of Hint.
func hintSchema() obj {
	return obj{
		"type":     "object",
		"required": []any{"binding", "due", "at"},
		"properties": obj{
			"binding": obj{
				"type":        "string",
				"description": "Queue binding name: the third token of the subject.",
			},
			"due": obj{
				"type":    "integer",
				"minimum": -1,
				"description": "Messages due in the queue when the hint was sent, or -1 when not " +
					"counted. A snapshot for logs, never a promise.",
			},
			"at": obj{
				"type":        "integer",
				"description": "When the hint was published, in Unix milliseconds.",
			},
			"lastId": obj{
				"type":    "integer",
				"minimum": 1,
				"description": "The largest message id inserted by the sends this hint reports, " +
					"when the publisher knows it; absent otherwise. The hint follows every insert " +
					"with an id up to lastId, so localcloud up publishes none of its own for them.",
			},
		},
		"description": "A wake-up hint. Unknown fields may be added later and must be ignored.",
	}
}
