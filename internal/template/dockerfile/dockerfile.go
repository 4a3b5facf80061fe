// Package dockerfile parses the subset of the Dockerfile language that `airlock template build`
// supports: one stage (one FROM, with ARGs allowed before it) of RUN, COPY, ADD, ENV, ARG, WORKDIR, USER,
// EXPOSE, CMD, ENTRYPOINT and LABEL, without heredocs, and with only the flags a single-stage build
// without BuildKit's mounts can honour (COPY and ADD --chown and --chmod).
//
// Parse only parses: it expands no variable, because what a variable holds depends on the build's state
// at the step (ARG values, earlier ENVs). The arguments a build expands, those of every instruction but
// RUN, CMD and ENTRYPOINT, come out in the syntax Expand reads: their quotes removed and their escapes
// resolved, a literal '$' written `\$` and a literal backslash `\\`. Expand, called with the build's
// variables at the step, then gives what Docker gives.
package dockerfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// Instruction is one instruction of a Dockerfile.
type Instruction struct {
	Line     int    // line of the instruction's first line, 1-based
	Cmd      string // upper case: FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, EXPOSE, CMD, ENTRYPOINT, LABEL
	Original string // the instruction as written, continuation lines joined with single spaces, comments inside continuations removed, trimmed
	// Args are the instruction's arguments:
	//
	//	FROM                  [image]
	//	RUN, CMD, ENTRYPOINT  the JSON array (JSON set), or [command] as written, for a shell
	//	COPY, ADD             [source..., dest]; from the JSON form (JSON set), each string as written
	//	ENV, LABEL            [key1, value1, key2, value2, ...]
	//	ARG                   [name] or [name, default]
	//	WORKDIR, USER         [the argument]
	//	EXPOSE                [port...], each PORT, PORT/tcp or PORT/udp once expanded
	//
	// All but those of RUN, CMD and ENTRYPOINT are in Expand's syntax (see the package comment). Lines
	// continued with the escape character are joined as Docker joins them: the escape character and the
	// line break removed, nothing added, so that `ENV PATH=/a:\` then `/b` gives /a:/b.
	Args  []string
	JSON  bool              // Args came from the JSON (exec) form
	Flags map[string]string // --name=value flags before the arguments, as written (COPY, ADD: "chown", "chmod"); nil when none
}

// maxSize bounds the Dockerfile Parse reads.
const maxSize = 1 << 20

// spaces are the characters that separate words, as in Docker (a regular expression's \s).
const spaces = " \t\r\f\v"

// supported lists the instructions Parse accepts, in the order error messages name them.
var supported = []string{"FROM", "RUN", "COPY", "ADD", "ENV", "ARG", "WORKDIR", "USER", "EXPOSE", "CMD", "ENTRYPOINT", "LABEL"}

// unsupported holds Docker's other instructions, which get a clearer error than an unknown word.
var unsupported = map[string]bool{
	"HEALTHCHECK": true, "ONBUILD": true, "SHELL": true, "STOPSIGNAL": true, "VOLUME": true, "MAINTAINER": true,
}

// directiveRE matches a parser directive line, "# key=value", leading space already trimmed.
var directiveRE = regexp.MustCompile(`^#[ \t]*([A-Za-z][A-Za-z0-9]*)[ \t]*=[ \t]*(.*?)[ \t]*$`)

// nameRE is the form of an ENV or ARG name.
var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Parse reads a Dockerfile (at most 1 MiB) and returns its instructions, in order. Errors wrap
// errdefs.ErrInvalidArgument (but for one reading r) and, when they are about an instruction or a
// directive, start with "line N: ", N the first line of the instruction.
func Parse(r io.Reader) ([]Instruction, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read Dockerfile: %w", err)
	}
	if len(b) > maxSize {
		return nil, fmt.Errorf("Dockerfile is over 1 MiB: %w", errdefs.ErrInvalidArgument)
	}
	b = bytes.TrimPrefix(b, []byte("\ufeff"))
	p := parser{escape: '\\'}
	return p.parse(string(b))
}

// parser holds the state of one Parse.
type parser struct {
	escape    byte // the escape character, '\\' or '`'
	sawEscape bool // an escape directive was read
	sawFrom   bool
	insts     []Instruction
}

// pending is an instruction whose lines are being read.
type pending struct {
	line int
	text strings.Builder // the lines joined as Docker joins them
	orig []string        // the lines, trimmed, for Instruction.Original
}

// errorf returns an error about line n, wrapping errdefs.ErrInvalidArgument.
func errorf(n int, format string, a ...any) error {
	return fmt.Errorf("line %d: %s: %w", n, fmt.Sprintf(format, a...), errdefs.ErrInvalidArgument)
}

// parse splits text into instructions and parses each.
func (p *parser) parse(text string) ([]Instruction, error) {
	directives := true // still at the top, where parser directives may be
	var cur *pending
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		n := i + 1
		line = strings.TrimSuffix(line, "\r")
		trimmed := strings.Trim(line, spaces)
		if directives {
			ok, err := p.directive(n, trimmed)
			if err != nil {
				return nil, err
			}
			if ok {
				continue
			}
			directives = false
		}
		if trimmed == "" || trimmed[0] == '#' {
			continue // a comment, also between continued lines
		}
		if cur == nil {
			cur = &pending{line: n}
			line = strings.TrimLeft(line, spaces)
		}
		piece, more := p.cutEscape(line)
		cur.text.WriteString(piece)
		if t := strings.Trim(piece, spaces); t != "" {
			cur.orig = append(cur.orig, t)
		}
		if more {
			continue
		}
		if err := p.finish(cur); err != nil {
			return nil, err
		}
		cur = nil
	}
	if cur != nil { // the last line ended with the escape character
		if err := p.finish(cur); err != nil {
			return nil, err
		}
	}
	if len(p.insts) == 0 {
		return nil, fmt.Errorf("Dockerfile has no instructions: %w", errdefs.ErrInvalidArgument)
	}
	if !p.sawFrom {
		last := p.insts[len(p.insts)-1]
		return nil, errorf(last.Line, "the Dockerfile ends before its FROM")
	}
	return p.insts, nil
}

// directive reads a parser directive from a line at the top of the file. It reports whether the line was
// one: "escape" sets the escape character; "syntax" and "check", which mean something to BuildKit only,
// are ignored; any other line ends the directives.
func (p *parser) directive(n int, trimmed string) (bool, error) {
	m := directiveRE.FindStringSubmatch(trimmed)
	if m == nil {
		return false, nil
	}
	switch strings.ToLower(m[1]) {
	case "escape":
		if p.sawEscape {
			return false, errorf(n, "the escape directive is given twice")
		}
		if m[2] != `\` && m[2] != "`" {
			return false, errorf(n, "escape directive %q: want \\ or `", m[2])
		}
		p.escape, p.sawEscape = m[2][0], true
		return true, nil
	case "syntax", "check":
		return true, nil
	}
	return false, nil
}

// cutEscape reports whether line continues on the next one (ends in the escape character, trailing
// space aside) and returns it without that character and what follows it.
func (p *parser) cutEscape(line string) (string, bool) {
	t := strings.TrimRight(line, spaces)
	if t != "" && t[len(t)-1] == p.escape {
		return t[:len(t)-1], true
	}
	return t, false
}

// finish parses a complete instruction and appends it.
func (p *parser) finish(pd *pending) error {
	in, err := p.instruction(pd.line, strings.Trim(pd.text.String(), spaces))
	if err != nil {
		return err
	}
	in.Original = strings.Join(pd.orig, " ")
	p.insts = append(p.insts, in)
	return nil
}

// cutWord splits s, which starts with no space, at its first space; the rest comes trimmed on the left.
func cutWord(s string) (word, rest string) {
	i := strings.IndexAny(s, spaces)
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimLeft(s[i:], spaces)
}

// keyword returns the instruction word kw upper-cased, if it is ASCII letters only.
func keyword(kw string) (string, bool) {
	b := []byte(kw)
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		case 'A' <= c && c <= 'Z':
		default:
			return "", false
		}
	}
	return string(b), true
}

// isSupported reports whether cmd is one of the supported instructions.
func isSupported(cmd string) bool {
	for _, s := range supported {
		if s == cmd {
			return true
		}
	}
	return false
}

// instruction parses the text of one instruction, its lines joined, that starts on line n.
func (p *parser) instruction(n int, text string) (Instruction, error) {
	kw, rest := cutWord(text)
	cmd, ok := keyword(kw)
	switch {
	case ok && unsupported[cmd]:
		return Instruction{}, errorf(n, "%s is not supported by airlock template build (supported: %s)", cmd, strings.Join(supported, ", "))
	case !ok || !isSupported(cmd):
		return Instruction{}, errorf(n, "unknown instruction %q", kw)
	case cmd == "FROM" && p.sawFrom:
		return Instruction{}, errorf(n, "only one FROM (multi-stage builds are not supported)")
	case cmd != "FROM" && cmd != "ARG" && !p.sawFrom:
		return Instruction{}, errorf(n, "the first instruction must be FROM (only ARG may come before it), not %s", cmd)
	}
	in := Instruction{Line: n, Cmd: cmd}
	var err error
	if in.Flags, rest, err = p.flags(n, cmd, rest); err != nil {
		return Instruction{}, err
	}
	switch cmd {
	case "FROM":
		err = p.from(&in, rest)
		p.sawFrom = true
	case "RUN", "CMD", "ENTRYPOINT":
		err = p.command(&in, rest)
	case "COPY", "ADD":
		err = p.copy(&in, rest)
	case "ENV", "LABEL":
		err = p.pairs(&in, rest)
	case "ARG":
		err = p.arg(&in, rest)
	case "WORKDIR":
		err = p.workdir(&in, rest)
	case "USER", "EXPOSE":
		err = p.words(&in, rest)
	}
	if err != nil {
		return Instruction{}, err
	}
	if cmd != "RUN" && cmd != "CMD" && cmd != "ENTRYPOINT" {
		for _, a := range in.Args {
			if err := checkSyntax(a); err != nil {
				return Instruction{}, fmt.Errorf("line %d: %s: %w", n, cmd, err)
			}
		}
	}
	return in, nil
}

// flags reads the --name=value flags at the start of rest (up to a "--" or the first other word) and
// returns them and what follows them. Only COPY and ADD take flags: --chown and --chmod.
func (p *parser) flags(n int, cmd, rest string) (map[string]string, string, error) {
	var flags map[string]string
	for strings.HasPrefix(rest, "--") {
		var tok string
		tok, rest = cutWord(rest)
		if tok == "--" {
			break
		}
		name, value, _ := strings.Cut(tok[2:], "=")
		copyLike := cmd == "COPY" || cmd == "ADD"
		switch {
		case copyLike && name == "from":
			return nil, "", errorf(n, "%s --from is not supported (multi-stage builds are not supported)", cmd)
		case copyLike && (name == "chown" || name == "chmod"):
		default:
			return nil, "", errorf(n, "%s --%s is not supported by airlock template build", cmd, name)
		}
		if _, dup := flags[name]; dup {
			return nil, "", errorf(n, "%s --%s is given twice", cmd, name)
		}
		if value == "" {
			return nil, "", errorf(n, "%s --%s needs a value (--%s=...)", cmd, name, name)
		}
		if name == "chown" {
			if err := checkChown(value); err != nil {
				return nil, "", fmt.Errorf("line %d: %s --chown=%s: %w", n, cmd, value, err)
			}
		} else if !validMode(value) {
			return nil, "", errorf(n, "%s --chmod=%s: want an octal mode, at most 7777", cmd, value)
		}
		if flags == nil {
			flags = map[string]string{}
		}
		flags[name] = value
	}
	return flags, rest, nil
}

// checkChown reports whether v is of the form USER[:GROUP] (either a name, an ID or a variable).
func checkChown(v string) error {
	user, group, hasGroup := strings.Cut(v, ":")
	switch {
	case user == "":
		return fmt.Errorf("no user: %w", errdefs.ErrInvalidArgument)
	case hasGroup && (group == "" || strings.Contains(group, ":")):
		return fmt.Errorf("want USER or USER:GROUP: %w", errdefs.ErrInvalidArgument)
	}
	return checkSyntax(v)
}

// validMode reports whether v is an octal file mode no greater than 07777, like 755 or 0644.
func validMode(v string) bool {
	if strings.Trim(v, "01234567") != "" {
		return false
	}
	m, err := strconv.ParseUint(v, 8, 32)
	return err == nil && m <= 0o7777
}

// from parses FROM's argument: one image (a template name, a name@digest, or scratch).
func (p *parser) from(in *Instruction, rest string) error {
	words, err := splitWords(rest, p.escape)
	if err != nil {
		return errorf(in.Line, "FROM: %v", err)
	}
	switch {
	case len(words) == 3 && strings.EqualFold(words[1], "AS"):
		return errorf(in.Line, "FROM ... AS %s names a build stage (multi-stage builds are not supported)", words[2])
	case len(words) != 1:
		return errorf(in.Line, "FROM takes one argument, the image")
	}
	image, err := unquote(words[0], p.escape)
	if err != nil {
		return errorf(in.Line, "FROM: %v", err)
	}
	in.Args = []string{image}
	return nil
}

// command parses RUN's, CMD's or ENTRYPOINT's arguments, the JSON form or a shell command.
func (p *parser) command(in *Instruction, rest string) error {
	if arr, ok := jsonArray(rest); ok {
		if in.Cmd == "RUN" && len(arr) == 0 {
			return errorf(in.Line, "RUN [] has no command")
		}
		in.Args, in.JSON = arr, true
		return nil
	}
	if rest == "" {
		if in.Cmd == "RUN" {
			return errorf(in.Line, "RUN needs a command")
		}
		return errorf(in.Line, "%s needs a command (%s [] for none)", in.Cmd, in.Cmd)
	}
	if in.Cmd == "RUN" {
		words, _ := splitWords(rest, p.escape) // a bad quote is for the shell to report
		if hasHeredoc(words) {
			return errorf(in.Line, "heredocs are not supported")
		}
	}
	in.Args = []string{rest}
	return nil
}

// copy parses COPY's or ADD's sources and destination.
func (p *parser) copy(in *Instruction, rest string) error {
	if arr, ok := jsonArray(rest); ok {
		in.Args, in.JSON = arr, true
	} else {
		words, err := splitWords(rest, p.escape)
		if err != nil {
			return errorf(in.Line, "%s: %v", in.Cmd, err)
		}
		if hasHeredoc(words) {
			return errorf(in.Line, "heredocs are not supported")
		}
		for _, w := range words {
			a, err := unquote(w, p.escape)
			if err != nil {
				return errorf(in.Line, "%s: %v", in.Cmd, err)
			}
			in.Args = append(in.Args, a)
		}
	}
	if len(in.Args) < 2 {
		return errorf(in.Line, "%s needs a source and a destination", in.Cmd)
	}
	if in.Cmd == "ADD" {
		for _, src := range in.Args[:len(in.Args)-1] {
			if strings.Contains(src, "://") || strings.HasPrefix(src, "git@") {
				return errorf(in.Line, "ADD from a URL is not supported; download it in a RUN step under the build's --allow policy")
			}
		}
	}
	return nil
}

// pairs parses ENV's or LABEL's KEY=VALUE words, or ENV's legacy "KEY VALUE WITH SPACES".
func (p *parser) pairs(in *Instruction, rest string) error {
	words, err := splitWords(rest, p.escape)
	if err != nil {
		return errorf(in.Line, "%s: %v", in.Cmd, err)
	}
	if len(words) == 0 {
		return errorf(in.Line, "%s needs KEY=VALUE", in.Cmd)
	}
	if in.Cmd == "ENV" && indexUnquoted(words[0], '=', p.escape) < 0 {
		// The legacy form: one variable, its value the rest of the line.
		if len(words) < 2 {
			return errorf(in.Line, "ENV %s needs a value (ENV %s=VALUE)", words[0], words[0])
		}
		return p.pair(in, words[0], strings.TrimLeft(rest[len(words[0]):], spaces))
	}
	for _, w := range words {
		i := indexUnquoted(w, '=', p.escape)
		if i < 0 {
			return errorf(in.Line, "%s: %q is not KEY=VALUE", in.Cmd, w)
		}
		if err := p.pair(in, w[:i], w[i+1:]); err != nil {
			return err
		}
	}
	return nil
}

// pair unquotes and checks one key and value and appends them to in.Args.
func (p *parser) pair(in *Instruction, rawKey, rawValue string) error {
	key, err := unquote(rawKey, p.escape)
	if err != nil {
		return errorf(in.Line, "%s: %v", in.Cmd, err)
	}
	if in.Cmd == "LABEL" {
		if key == "" {
			return errorf(in.Line, "LABEL: empty key")
		}
	} else if !nameRE.MatchString(key) {
		return errorf(in.Line, "%s: bad variable name %q (want a letter or _, then letters, digits or _)", in.Cmd, key)
	}
	value, err := unquote(rawValue, p.escape)
	if err != nil {
		return errorf(in.Line, "%s %s: %v", in.Cmd, key, err)
	}
	in.Args = append(in.Args, key, value)
	return nil
}

// arg parses ARG's argument: one NAME or NAME=default.
func (p *parser) arg(in *Instruction, rest string) error {
	words, err := splitWords(rest, p.escape)
	if err != nil {
		return errorf(in.Line, "ARG: %v", err)
	}
	switch {
	case len(words) == 0:
		return errorf(in.Line, "ARG needs a name")
	case len(words) > 1:
		return errorf(in.Line, "one ARG per instruction (write ARG %s, then ARG %s)", words[0], words[1])
	}
	w := words[0]
	i := indexUnquoted(w, '=', p.escape)
	if i >= 0 {
		return p.pair(in, w[:i], w[i+1:])
	}
	name, err := unquote(w, p.escape)
	if err != nil {
		return errorf(in.Line, "ARG: %v", err)
	}
	if !nameRE.MatchString(name) {
		return errorf(in.Line, "ARG: bad variable name %q (want a letter or _, then letters, digits or _)", name)
	}
	in.Args = []string{name}
	return nil
}

// workdir parses WORKDIR's argument: the rest of the line, which may hold spaces.
func (p *parser) workdir(in *Instruction, rest string) error {
	if rest == "" {
		return errorf(in.Line, "WORKDIR needs a directory")
	}
	dir, err := unquote(rest, p.escape)
	if err != nil {
		return errorf(in.Line, "WORKDIR: %v", err)
	}
	in.Args = []string{dir}
	return nil
}

// words parses USER's argument (one word) or EXPOSE's (one or more).
func (p *parser) words(in *Instruction, rest string) error {
	words, err := splitWords(rest, p.escape)
	if err != nil {
		return errorf(in.Line, "%s: %v", in.Cmd, err)
	}
	switch {
	case in.Cmd == "USER" && len(words) != 1:
		return errorf(in.Line, "USER takes one argument, USER[:GROUP]")
	case len(words) == 0:
		return errorf(in.Line, "EXPOSE needs a port")
	}
	for _, w := range words {
		a, err := unquote(w, p.escape)
		if err != nil {
			return errorf(in.Line, "%s: %v", in.Cmd, err)
		}
		in.Args = append(in.Args, a)
	}
	return nil
}

// jsonArray reports whether s is a JSON array of strings, and returns it.
func jsonArray(s string) ([]string, bool) {
	if !strings.HasPrefix(s, "[") {
		return nil, false
	}
	var raw []any
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, false
	}
	arr := make([]string, 0, len(raw))
	for _, v := range raw {
		str, ok := v.(string)
		if !ok {
			return nil, false
		}
		arr = append(arr, str)
	}
	return arr, true
}

// hasHeredoc reports whether a word opens a heredoc, as Docker sees one: [fd]<<[-]NAME, NAME not
// starting with '<' (so a here-string, <<<, is not one).
func hasHeredoc(words []string) bool {
	for _, w := range words {
		w = strings.TrimLeft(w, "0123456789")
		rest, ok := strings.CutPrefix(w, "<<")
		if !ok {
			continue
		}
		rest = strings.TrimPrefix(rest, "-")
		if rest != "" && rest[0] != '<' {
			return true
		}
	}
	return false
}
