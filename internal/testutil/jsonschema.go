package testutil

import (
	"os"
	"path/filepath"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// CompileSchema compiles the JSON schema in the file at path, asserting
// formats, with no network access (the schema must be bundled). Tests use it
// for the official AsyncAPI 3.0.0 schema kept in internal/asyncapi/testdata.
func CompileSchema(path string) (*jsonschema.Schema, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	url := "file:///" + filepath.Base(path)
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}
