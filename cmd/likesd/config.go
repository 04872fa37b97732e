package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Configuration sources. Every flag of a command can be given three ways,
// and the first that sets it wins:
//
//	1. the command line            --http-port 8080
//	2. the environment             LIKES_HTTP_PORT=8080
//	3. the --config YAML file      http-port: 8080
//	4. the flag's default
//
// The mapping is generic over the command's flag.FlagSet (loadConfig visits
// every flag registered before it runs, including flags other files add), so
// a new flag is configurable the moment it is registered. The file holds only
// flag names (an unknown key is an error naming its line); the environment
// name of --some-flag is LIKES_SOME_FLAG. The variables in reservedEnv are
// read directly by the code that needs them (secrets, test knobs, the scripts'
// own settings) and never map to a flag, and no flag may take a secret's name.

// errConfig prefixes every refused configuration file or variable.
var errConfig = errors.New("config")

// envPrefix starts the environment name of every flag.
const envPrefix = "LIKES_"

// reservedEnv are LIKES_* variables with a meaning of their own: never a
// flag's override. secret: a credential, read directly where it is used and
// deliberately not a flag (it would show in ps and in config files).
var reservedEnv = map[string]struct {
	secret bool
	what   string
}{
	"LIKES_AUTH_SECRET":             {true, "HS256 token secret (likesd, likectl token)"},
	"LIKES_AUTH_PRIVATE_KEY":        {true, "likectl token's signing key file"},
	"LIKES_ETCD_PASSWORD":           {true, "password of --etcd-user"},
	"LIKES_CASSANDRA_USER":          {true, "Cassandra user (--store cassandra)"},
	"LIKES_CASSANDRA_PASSWORD":      {true, "Cassandra password (--store cassandra)"},
	"LIKES_REDIS_PASSWORD":          {true, "Redis password (--cache redis)"},
	"LIKES_TESTONLY_DISK_FULL_FILE": {false, "TESTING ONLY: the chaos suite's disk-full knob"},
	"LIKES_CASSANDRA_HOSTS":         {false, "likectl migrate's default --hosts"},
	"LIKES_KAFKA_BROKERS":           {false, "likectl dlq's default --kafka"},
	// scripts/servers.sh's own settings: a developer who exported one for it
	// must not reconfigure likesd by accident (`likesd dev --etcd-port` has no
	// environment override for this reason).
	"LIKES_ETCD_PORT":              {false, "scripts/servers.sh"},
	"LIKES_ETCD_PEER_PORT":         {false, "scripts/servers.sh"},
	"LIKES_REDIS_PORT":             {false, "scripts/servers.sh"},
	"LIKES_KAFKA_PORT":             {false, "scripts/servers.sh"},
	"LIKES_KAFKA_CONTROLLER_PORT":  {false, "scripts/servers.sh"},
	"LIKES_KAFKA_VERSION":          {false, "scripts/servers.sh"},
	"LIKES_CASSANDRA_PORT":         {false, "scripts/servers.sh"},
	"LIKES_CASSANDRA_STORAGE_PORT": {false, "scripts/servers.sh"},
	"LIKES_CASSANDRA_JMX_PORT":     {false, "scripts/servers.sh"},
	"LIKES_CASSANDRA_VERSION":      {false, "scripts/servers.sh"},
	"LIKES_CASSANDRA_PAXOS":        {false, "scripts/servers.sh"},
}

// reservedEnvPrefixes are families of variables of the tests and scripts.
var reservedEnvPrefixes = []string{"LIKES_TEST_", "LIKES_TESTONLY_", "LIKES_SERVERS_", "LIKES_SIM_", "LIKES_MEASURE"}

// cmdlineOnly flags are never read from the file or the environment: the
// file's own name, and switches that turn guarantees off for a test, which no
// deployment's config (or an inherited variable) may carry.
var cmdlineOnly = map[string]bool{"config": true, "unsafe-break": true}

// envName is the environment variable of the flag name.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// isReservedEnv reports whether v is one of reservedEnv or its families.
func isReservedEnv(v string) bool {
	if _, ok := reservedEnv[v]; ok {
		return true
	}
	for _, p := range reservedEnvPrefixes {
		if strings.HasPrefix(v, p) {
			return true
		}
	}
	return false
}

// registerConfig adds --config to fs.
func registerConfig(fs *flag.FlagSet) {
	fs.String("config", "", "YAML file of settings: each key is one of this command's flag names (e.g. http-port: 8080); $"+envName("config")+" names it too")
}

// checkFlagNames refuses a flag set in which a flag's environment name is a
// secret's: a programming error (the secret would become a flag), caught by
// the tests of every command.
func checkFlagNames(fs *flag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if r, ok := reservedEnv[envName(f.Name)]; ok && r.secret {
			errs = append(errs, fmt.Errorf("%w: flag --%s would map to $%s, a secret read directly; rename the flag", errConfig, f.Name, envName(f.Name)))
		}
	})
	return errors.Join(errs...)
}

// usageError is a command line, file or variable that cannot be parsed: the
// process exits 2 with the message and a pointer to -h.
type usageError struct {
	cmd string
	err error
}

func (u *usageError) Error() string { return u.err.Error() }
func (u *usageError) Unwrap() error { return u.err }

// errHelpShown is returned by parseCommand after -h printed the help: the
// process exits 0.
var errHelpShown = errors.New("help shown")

// parseCommand parses args into fs (which must have --config registered),
// then fills every flag the command line did not set from the environment,
// then from the file --config (or $LIKES_CONFIG) names. -h prints the help
// to stdout and returns errHelpShown. A parse error is a *usageError.
func parseCommand(fs *flag.FlagSet, args []string, stdout io.Writer, intro string) error {
	fs.SetOutput(io.Discard) // help goes to stdout, errors back to the caller
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(fs, stdout, intro)
			return errHelpShown
		}
		return &usageError{cmd: fs.Name(), err: err}
	}
	if fs.NArg() > 0 {
		return &usageError{cmd: fs.Name(), err: fmt.Errorf("unexpected argument %q (flags only)", fs.Arg(0))}
	}
	if err := loadConfig(fs); err != nil {
		return &usageError{cmd: fs.Name(), err: err}
	}
	return nil
}

// printHelp writes the command's help: its intro, the sources of settings,
// and every flag with its environment name.
func printHelp(fs *flag.FlagSet, w io.Writer, intro string) {
	fmt.Fprintf(w, "usage: %s [flags]\n\n%s\n", fs.Name(), strings.TrimSpace(intro))
	fmt.Fprint(w, `
Every flag can also be set as $LIKES_<FLAG> (--http-port: LIKES_HTTP_PORT) or as
a key of the --config YAML file (http-port: 8080); the command line wins over
the environment, which wins over the file, which wins over the default. Secrets
are never flags: $LIKES_AUTH_SECRET, $LIKES_ETCD_PASSWORD, $LIKES_CASSANDRA_USER,
$LIKES_CASSANDRA_PASSWORD and $LIKES_REDIS_PASSWORD are read directly.

flags:
`)
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if kind != "" {
			line += " " + kind
		}
		env := envName(f.Name)
		switch {
		case cmdlineOnly[f.Name] && f.Name != "config":
			env = "command line only"
		case isReservedEnv(env):
			env = "no environment override"
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		if !isZeroDefault(f) {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, " [%s]\n", env)
	})
}

func isZeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return true
	}
	return false
}

// loadConfig applies the environment and the config file to every flag of
// fs that the command line did not set (precedence flag > env > file >
// default). Each flag is Set at most once, from the source that wins.
func loadConfig(fs *flag.FlagSet) error {
	if err := checkFlagNames(fs); err != nil {
		return err
	}
	onCmdline := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCmdline[f.Name] = true })

	var errs []error
	env := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		v := envName(f.Name)
		if isReservedEnv(v) {
			return
		}
		val, ok := os.LookupEnv(v)
		if !ok || val == "" { // an empty variable (a blank template line) is unset
			return
		}
		if cmdlineOnly[f.Name] && f.Name != "config" {
			errs = append(errs, fmt.Errorf("%w: $%s is set, but --%s is a command-line-only flag (unset the variable)", errConfig, v, f.Name))
			return
		}
		env[f.Name] = val
	})

	// The file: --config on the command line, else $LIKES_CONFIG.
	path := ""
	if cf := fs.Lookup("config"); cf != nil {
		path = cf.Value.String()
		if !onCmdline["config"] && env["config"] != "" {
			path = env["config"]
			_ = cf.Value.Set(path)
		}
	}
	delete(env, "config")
	var file map[string]fileValue
	if path != "" {
		var err error
		file, err = readConfigFile(fs, path)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}

	names := make([]string, 0, len(env)+len(file))
	seen := map[string]bool{}
	for n := range env {
		names, seen[n] = append(names, n), true
	}
	for n := range file {
		if !seen[n] {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		if onCmdline[n] {
			continue
		}
		if v, ok := env[n]; ok {
			if err := fs.Set(n, v); err != nil {
				errs = append(errs, fmt.Errorf("%w: $%s=%q: %w", errConfig, envName(n), v, err))
			}
			continue
		}
		fv := file[n]
		if err := fs.Set(n, fv.text); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s:%d: %s: %w", errConfig, path, fv.line, n, err))
		}
	}
	return errors.Join(errs...)
}

// fileValue is one key's value in the config file, as flag text.
type fileValue struct {
	text string
	line int
}

// maxConfigBytes bounds the config file (it is read whole).
const maxConfigBytes = 1 << 20

// readConfigFile reads a YAML mapping of flag names to values, checking each
// key is a flag of fs and each value has the flag's type.
func readConfigFile(fs *flag.FlagSet, path string) (map[string]fileValue, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: --config: %w", errConfig, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: --config %s: %w", errConfig, path, err)
	}
	if len(b) > maxConfigBytes {
		return nil, fmt.Errorf("%w: --config %s is larger than %d bytes", errConfig, path, maxConfigBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // an empty file sets nothing
		}
		return nil, fmt.Errorf("%w: %s: %w", errConfig, path, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %s: one YAML document expected, found a second (line %d)", errConfig, path, extra.Line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, nil
		}
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: %s:%d: the file must be a mapping of flag names to values (http-port: 8080)", errConfig, path, root.Line)
	}
	out := map[string]fileValue{}
	var errs []error
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		at := fmt.Sprintf("%s:%d", path, k.Line)
		if k.Kind != yaml.ScalarNode {
			errs = append(errs, fmt.Errorf("%w: %s: a key must be a flag name", errConfig, at))
			continue
		}
		name := k.Value
		if _, dup := out[name]; dup {
			errs = append(errs, fmt.Errorf("%w: %s: key %q given twice", errConfig, at, name))
			continue
		}
		fl := fs.Lookup(name)
		if fl == nil {
			errs = append(errs, fmt.Errorf("%w: %s: unknown key %q: %s", errConfig, at, name, unknownKeyHint(fs, name)))
			continue
		}
		if cmdlineOnly[name] {
			errs = append(errs, fmt.Errorf("%w: %s: %q cannot be set in the config file (command line only)", errConfig, at, name))
			continue
		}
		text, err := flagText(fl, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %s: %w", errConfig, fmt.Sprintf("%s:%d", path, v.Line), name, err))
			continue
		}
		out[name] = fileValue{text: text, line: v.Line}
	}
	return out, errors.Join(errs...)
}

// unknownKeyHint says why a key is not one of the command's flags.
func unknownKeyHint(fs *flag.FlagSet, name string) string {
	if r, ok := reservedEnv[envName(name)]; ok && r.secret {
		return "secrets are not settings; set $" + envName(name) + " in the environment (e.g. a systemd EnvironmentFile or a Kubernetes Secret)"
	}
	for _, other := range commandFlagSets() {
		if other.Name() != fs.Name() && other.Lookup(name) != nil {
			return "it is a flag of " + other.Name() + ", not of " + fs.Name()
		}
	}
	return "not a flag of " + fs.Name() + " (" + fs.Name() + " -h lists them)"
}

// flagKind is the type a flag's value must have in the file.
type flagKind int

const (
	kindText flagKind = iota // a custom flag.Value: any scalar, checked by its Set
	kindString
	kindBool
	kindInt
	kindFloat
	kindDuration
)

func kindOf(fl *flag.Flag) flagKind {
	if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return kindBool
	}
	g, ok := fl.Value.(flag.Getter)
	if !ok {
		return kindText
	}
	switch g.Get().(type) {
	case string:
		return kindString
	case int, int64, uint, uint64:
		return kindInt
	case float64:
		return kindFloat
	case time.Duration:
		return kindDuration
	}
	return kindText
}

// listFlag reports whether a flag takes a comma-separated list: the file may
// give it as a YAML sequence.
func listFlag(fl *flag.Flag) bool { return strings.Contains(fl.Usage, "comma-separated") }

// flagText checks v has the flag's type and returns it as flag text.
func flagText(fl *flag.Flag, v *yaml.Node) (string, error) {
	kind := kindOf(fl)
	switch v.Kind {
	case yaml.AliasNode:
		return "", errors.New("aliases are not supported")
	case yaml.MappingNode:
		return "", fmt.Errorf("got a mapping, want %s", kindWord(kind))
	case yaml.SequenceNode:
		if kind != kindString || !listFlag(fl) {
			return "", fmt.Errorf("got a list, want %s", kindWord(kind))
		}
		items := make([]string, 0, len(v.Content))
		for _, it := range v.Content {
			if it.Kind != yaml.ScalarNode || it.Tag == "!!null" || it.Tag == "!!bool" || strings.Contains(it.Value, ",") {
				return "", fmt.Errorf("list item at line %d: want a plain string without commas", it.Line)
			}
			items = append(items, it.Value)
		}
		return strings.Join(items, ","), nil
	}
	tag, s := v.Tag, v.Value
	if tag == "!!null" {
		return "", fmt.Errorf("no value; want %s (remove the key to keep the default)", kindWord(kind))
	}
	switch kind {
	case kindBool:
		if tag != "!!bool" {
			return "", fmt.Errorf("%q is not a boolean (true or false)", s)
		}
	case kindInt:
		if tag != "!!int" {
			return "", fmt.Errorf("%q is not an integer", s)
		}
		if _, err := strconv.ParseInt(s, 0, 64); err != nil {
			return "", fmt.Errorf("%q: %w", s, err)
		}
	case kindFloat:
		if tag != "!!int" && tag != "!!float" {
			return "", fmt.Errorf("%q is not a number", s)
		}
		if _, err := strconv.ParseFloat(s, 64); err != nil {
			return "", fmt.Errorf("%q is not a number", s)
		}
	case kindDuration:
		if tag != "!!str" && !(tag == "!!int" && s == "0") {
			return "", fmt.Errorf("%q is not a duration (like 30s, 500ms or 2m)", s)
		}
		if _, err := time.ParseDuration(s); err != nil {
			return "", fmt.Errorf("%q is not a duration (like 30s, 500ms or 2m)", s)
		}
	case kindString:
		if tag == "!!bool" {
			return "", fmt.Errorf("%s is a boolean; want a string (quote it)", s)
		}
	}
	return s, nil
}

func kindWord(k flagKind) string {
	switch k {
	case kindBool:
		return "a boolean"
	case kindInt:
		return "an integer"
	case kindFloat:
		return "a number"
	case kindDuration:
		return "a duration"
	case kindString:
		return "a string"
	}
	return "a value"
}
