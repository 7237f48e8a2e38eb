package bindings

// Environment variables of the app contract: `localcloud env` and
// `localcloud run` set them, and the FromEnv functions of kv and queue read
// them. They are the one place these names are spelled.
const (
	// EnvStackName holds the stack's name.
	EnvStackName = "LOCALCLOUD_STACK_NAME"
	// EnvNATSURL holds the URL of the running up's hint server. It is
	// missing when up is not running and the stack picks a free port.
	EnvNATSURL = "LOCALCLOUD_NATS_URL"
	// EnvNATSToken holds the hint server's token; set only when the stack
	// sets notify.token.
	EnvNATSToken = "LOCALCLOUD_NATS_TOKEN"
	// EnvBindingPrefix starts the variable that carries one binding's JSON:
	// LOCALCLOUD_BINDING_<NAME>, NAME in upper case with - as _.
	EnvBindingPrefix = "LOCALCLOUD_BINDING_"
)
