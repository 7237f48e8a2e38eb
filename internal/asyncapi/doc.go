// Package asyncapi describes a stack's hint channels as an AsyncAPI 3.0.0 document, for
// `localcloud asyncapi`. It is the only package that needs yaml.v3 for output; apps never
// import it.
package asyncapi
