package dockerfile

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/airlockrun/airlock/internal/errdefs"
)

// in returns an instruction without flags, from the shell form (or none).
func in(line int, cmd, original string, args ...string) Instruction {
	return Instruction{Line: line, Cmd: cmd, Original: original, Args: args}
}

// jsonIn returns an instruction whose arguments came from the JSON form.
func jsonIn(line int, cmd, original string, args ...string) Instruction {
	if args == nil {
		args = []string{}
	}
	return Instruction{Line: line, Cmd: cmd, Original: original, Args: args, JSON: true}
}

// withFlags returns i with flags, given as name, value pairs.
func withFlags(i Instruction, kv ...string) Instruction {
	i.Flags = map[string]string{}
	for j := 0; j < len(kv); j += 2 {
		i.Flags[kv[j]] = kv[j+1]
	}
	return i
}

// show formats instructions for a failure message.
func show(ins []Instruction) string {
	var b strings.Builder
	for _, i := range ins {
		fmt.Fprintf(&b, "\n\t{Line: %d, Cmd: %q, Original: %q, Args: %#v, JSON: %v, Flags: %v}", i.Line, i.Cmd, i.Original, i.Args, i.JSON, i.Flags)
	}
	return b.String()
}

// from is the FROM that instructionTests put before their instruction.
var from = in(1, "FROM", "FROM base", "base")

// instructionTests are single instructions, each parsed on line 2 after "FROM base".
var instructionTests = []struct {
	name string
	in   string
	want Instruction
}{
	// RUN, CMD, ENTRYPOINT.
	{"run shell", `RUN echo hi`, in(2, "RUN", `RUN echo hi`, "echo hi")},
	{"keyword lower case", `run echo hi`, in(2, "RUN", `run echo hi`, "echo hi")},
	{"keyword mixed case", `Run echo hi`, in(2, "RUN", `Run echo hi`, "echo hi")},
	{"tab after keyword", "RUN\techo hi", in(2, "RUN", "RUN\techo hi", "echo hi")},
	{"surrounding space trimmed", "  RUN echo hi  \t", in(2, "RUN", "RUN echo hi", "echo hi")},
	{"run shell keeps quotes and vars", `RUN echo "$HOME" 'a  b' \$x`, in(2, "RUN", `RUN echo "$HOME" 'a  b' \$x`, `echo "$HOME" 'a  b' \$x`)},
	{"run json", `RUN ["echo", "a b"]`, jsonIn(2, "RUN", `RUN ["echo", "a b"]`, "echo", "a b")},
	{"run json escapes", `RUN ["sh", "-c", "echo \"x\" \\ \u00e9"]`, jsonIn(2, "RUN", `RUN ["sh", "-c", "echo \"x\" \\ \u00e9"]`, "sh", "-c", `echo "x" \ é`)},
	{"run json no space", `RUN ["true"]`, jsonIn(2, "RUN", `RUN ["true"]`, "true")},
	{"run bad json is shell", `RUN [ "a"`, in(2, "RUN", `RUN [ "a"`, `[ "a"`)},
	{"run json of numbers is shell", `RUN [1, 2]`, in(2, "RUN", `RUN [1, 2]`, `[1, 2]`)},
	{"run json with null is shell", `RUN ["a", null]`, in(2, "RUN", `RUN ["a", null]`, `["a", null]`)},
	{"run json then more is shell", `RUN ["a"] b`, in(2, "RUN", `RUN ["a"] b`, `["a"] b`)},
	{"run test brackets", `RUN [ -f x ] && echo y`, in(2, "RUN", `RUN [ -f x ] && echo y`, `[ -f x ] && echo y`)},
	{"run here-string", `RUN cat <<<hello`, in(2, "RUN", `RUN cat <<<hello`, `cat <<<hello`)},
	{"run shift", `RUN echo $((1<<2))`, in(2, "RUN", `RUN echo $((1<<2))`, `echo $((1<<2))`)},
	{"run quoted heredoc marker", `RUN echo "<<EOF"`, in(2, "RUN", `RUN echo "<<EOF"`, `echo "<<EOF"`)},
	{"run lone <<", `RUN echo << `, in(2, "RUN", `RUN echo <<`, `echo <<`)},
	{"run unterminated quote is the shell's", `RUN echo "hi`, in(2, "RUN", `RUN echo "hi`, `echo "hi`)},
	{"run flag-like word after command", `RUN ls --all`, in(2, "RUN", `RUN ls --all`, `ls --all`)},
	{"run -- ends flags", `RUN -- --x`, in(2, "RUN", `RUN -- --x`, `--x`)},
	{"cmd json empty", `CMD []`, jsonIn(2, "CMD", `CMD []`)},
	{"cmd json empty spaced", `CMD [ ]`, jsonIn(2, "CMD", `CMD [ ]`)},
	{"cmd shell", `CMD python app.py`, in(2, "CMD", `CMD python app.py`, "python app.py")},
	{"entrypoint json", `ENTRYPOINT ["python", "-m", "http.server"]`, jsonIn(2, "ENTRYPOINT", `ENTRYPOINT ["python", "-m", "http.server"]`, "python", "-m", "http.server")},
	{"entrypoint json empty", `entrypoint []`, jsonIn(2, "ENTRYPOINT", `entrypoint []`)},
	{"entrypoint shell", `ENTRYPOINT exec app`, in(2, "ENTRYPOINT", `ENTRYPOINT exec app`, "exec app")},

	// COPY, ADD.
	{"copy", `COPY a b /dst/`, in(2, "COPY", `COPY a b /dst/`, "a", "b", "/dst/")},
	{"copy spaces", "COPY   a \t /dst", in(2, "COPY", "COPY   a \t /dst", "a", "/dst")},
	{"copy chown chmod", `COPY --chown=app:app --chmod=0644 a /dst`, withFlags(in(2, "COPY", `COPY --chown=app:app --chmod=0644 a /dst`, "a", "/dst"), "chown", "app:app", "chmod", "0644")},
	{"copy chown uid", `COPY --chown=1000 a /d`, withFlags(in(2, "COPY", `COPY --chown=1000 a /d`, "a", "/d"), "chown", "1000")},
	{"copy chown vars", `COPY --chown=$U:${G} a /d`, withFlags(in(2, "COPY", `COPY --chown=$U:${G} a /d`, "a", "/d"), "chown", "$U:${G}")},
	{"copy chmod max", `COPY --chmod=7777 a /d`, withFlags(in(2, "COPY", `COPY --chmod=7777 a /d`, "a", "/d"), "chmod", "7777")},
	{"copy chmod 755", `COPY --chmod=755 a /d`, withFlags(in(2, "COPY", `COPY --chmod=755 a /d`, "a", "/d"), "chmod", "755")},
	{"copy chmod leading zeros", `COPY --chmod=00644 a /d`, withFlags(in(2, "COPY", `COPY --chmod=00644 a /d`, "a", "/d"), "chmod", "00644")},
	{"copy -- ends flags", `COPY -- --odd /d`, in(2, "COPY", `COPY -- --odd /d`, "--odd", "/d")},
	{"copy json", `COPY ["a b", "c", "/dst"]`, jsonIn(2, "COPY", `COPY ["a b", "c", "/dst"]`, "a b", "c", "/dst")},
	{"copy json with flag", `COPY --chmod=600 ["a", "/d"]`, withFlags(jsonIn(2, "COPY", `COPY --chmod=600 ["a", "/d"]`, "a", "/d"), "chmod", "600")},
	{"copy json keeps $", `COPY ["$SRC", "/d"]`, jsonIn(2, "COPY", `COPY ["$SRC", "/d"]`, "$SRC", "/d")},
	{"copy quoted", `COPY "a b" 'c d' /dst`, in(2, "COPY", `COPY "a b" 'c d' /dst`, "a b", "c d", "/dst")},
	{"copy escaped space", `COPY a\ b /dst`, in(2, "COPY", `COPY a\ b /dst`, "a b", "/dst")},
	{"copy var", `COPY $SRC ${DST}`, in(2, "COPY", `COPY $SRC ${DST}`, "$SRC", "${DST}")},
	{"copy literal $", `COPY 'a$b' /d`, in(2, "COPY", `COPY 'a$b' /d`, `a\$b`, "/d")},
	{"copy glob", `COPY *.py /app/`, in(2, "COPY", `COPY *.py /app/`, "*.py", "/app/")},
	{"add", `ADD app.tar.gz /opt/`, in(2, "ADD", `ADD app.tar.gz /opt/`, "app.tar.gz", "/opt/")},
	{"add chown", `add --chown=u a /b`, withFlags(in(2, "ADD", `add --chown=u a /b`, "a", "/b"), "chown", "u")},
	{"add url-like local name", `ADD http.conf /etc/`, in(2, "ADD", `ADD http.conf /etc/`, "http.conf", "/etc/")},

	// ENV.
	{"env", `ENV A=1`, in(2, "ENV", `ENV A=1`, "A", "1")},
	{"env several", `ENV A=1 B=2  C=3`, in(2, "ENV", `ENV A=1 B=2  C=3`, "A", "1", "B", "2", "C", "3")},
	{"env empty value", `ENV A= B=""`, in(2, "ENV", `ENV A= B=""`, "A", "", "B", "")},
	{"env double quotes", `ENV A="two words"`, in(2, "ENV", `ENV A="two words"`, "A", "two words")},
	{"env single quotes", `ENV A='two words'`, in(2, "ENV", `ENV A='two words'`, "A", "two words")},
	{"env escaped space", `ENV A=two\ words`, in(2, "ENV", `ENV A=two\ words`, "A", "two words")},
	{"env escaped quote", `ENV A=\"x\" B="say \"hi\""`, in(2, "ENV", `ENV A=\"x\" B="say \"hi\""`, "A", `"x"`, "B", `say "hi"`)},
	{"env quote in single quotes", `ENV A='a"b'`, in(2, "ENV", `ENV A='a"b'`, "A", `a"b`)},
	{"env single quote in double", `ENV A="it's"`, in(2, "ENV", `ENV A="it's"`, "A", "it's")},
	{"env concatenated quotes", `ENV A="x"'y'z`, in(2, "ENV", `ENV A="x"'y'z`, "A", "xyz")},
	{"env equals in value", `ENV A=b=c`, in(2, "ENV", `ENV A=b=c`, "A", "b=c")},
	{"env vars kept", `ENV PATH=$HOME/bin:${PATH}`, in(2, "ENV", `ENV PATH=$HOME/bin:${PATH}`, "PATH", "$HOME/bin:${PATH}")},
	{"env vars in double quotes kept", `ENV A="$B c"`, in(2, "ENV", `ENV A="$B c"`, "A", "$B c")},
	{"env modifier with quoted space", `ENV A=${B:-"x y"}`, in(2, "ENV", `ENV A=${B:-"x y"}`, "A", "${B:-x y}")},
	{"env single-quoted $ escaped", `ENV A='$HOME'`, in(2, "ENV", `ENV A='$HOME'`, "A", `\$HOME`)},
	{"env escaped $", `ENV A=\$HOME`, in(2, "ENV", `ENV A=\$HOME`, "A", `\$HOME`)},
	{"env escaped $ in double quotes", `ENV A="\$HOME"`, in(2, "ENV", `ENV A="\$HOME"`, "A", `\$HOME`)},
	{"env backslash in single quotes", `ENV A='a\b'`, in(2, "ENV", `ENV A='a\b'`, "A", `a\\b`)},
	{"env backslash escaped", `ENV A=a\\b`, in(2, "ENV", `ENV A=a\\b`, "A", `a\\b`)},
	{"env backslash kept in double quotes", `ENV A="a\nb"`, in(2, "ENV", `ENV A="a\nb"`, "A", `a\\nb`)},
	{"env escape dropped outside quotes", `ENV A=a\nb`, in(2, "ENV", `ENV A=a\nb`, "A", "anb")},
	{"env quoted key", `ENV "Q"=1`, in(2, "ENV", `ENV "Q"=1`, "Q", "1")},
	{"env key underscore digits", `ENV _x9=1`, in(2, "ENV", `ENV _x9=1`, "_x9", "1")},
	{"env legacy", `ENV A some value  here`, in(2, "ENV", `ENV A some value  here`, "A", "some value  here")},
	{"env legacy quotes", `ENV A "x y" 'z'`, in(2, "ENV", `ENV A "x y" 'z'`, "A", "x y z")},
	{"env legacy equals later", `ENV A b=c`, in(2, "ENV", `ENV A b=c`, "A", "b=c")},
	{"env legacy var", `ENV A $B`, in(2, "ENV", `ENV A $B`, "A", "$B")},
	{"env unicode", `ENV A="héllo wörld"`, in(2, "ENV", `ENV A="héllo wörld"`, "A", "héllo wörld")},

	// LABEL.
	{"label", `LABEL a=b`, in(2, "LABEL", `LABEL a=b`, "a", "b")},
	{"label several", `LABEL org.opencontainers.image.title=x "my key"="my value" a-b.c='v'`, in(2, "LABEL", `LABEL org.opencontainers.image.title=x "my key"="my value" a-b.c='v'`, "org.opencontainers.image.title", "x", "my key", "my value", "a-b.c", "v")},
	{"label empty value", `LABEL a=`, in(2, "LABEL", `LABEL a=`, "a", "")},
	{"label var", `LABEL version=$V`, in(2, "LABEL", `LABEL version=$V`, "version", "$V")},

	// ARG.
	{"arg", `ARG A`, in(2, "ARG", `ARG A`, "A")},
	{"arg default", `ARG A=1`, in(2, "ARG", `ARG A=1`, "A", "1")},
	{"arg empty default", `ARG A=`, in(2, "ARG", `ARG A=`, "A", "")},
	{"arg quoted default", `ARG A="x y"`, in(2, "ARG", `ARG A="x y"`, "A", "x y")},
	{"arg var default", `ARG A=$B`, in(2, "ARG", `ARG A=$B`, "A", "$B")},

	// WORKDIR, USER, EXPOSE.
	{"workdir", `WORKDIR /app`, in(2, "WORKDIR", `WORKDIR /app`, "/app")},
	{"workdir var", `WORKDIR $HOME/x`, in(2, "WORKDIR", `WORKDIR $HOME/x`, "$HOME/x")},
	{"workdir space", `WORKDIR /my dir`, in(2, "WORKDIR", `WORKDIR /my dir`, "/my dir")},
	{"workdir quoted", `WORKDIR "/my dir"`, in(2, "WORKDIR", `WORKDIR "/my dir"`, "/my dir")},
	{"user", `USER app`, in(2, "USER", `USER app`, "app")},
	{"user group", `USER app:grp`, in(2, "USER", `USER app:grp`, "app:grp")},
	{"user uid", `user 1000:1000`, in(2, "USER", `user 1000:1000`, "1000:1000")},
	{"user var", `USER $U`, in(2, "USER", `USER $U`, "$U")},
	{"expose", `EXPOSE 80`, in(2, "EXPOSE", `EXPOSE 80`, "80")},
	{"expose several", `EXPOSE 80/tcp  53/udp 8080`, in(2, "EXPOSE", `EXPOSE 80/tcp  53/udp 8080`, "80/tcp", "53/udp", "8080")},
	{"expose var", `EXPOSE ${PORT}`, in(2, "EXPOSE", `EXPOSE ${PORT}`, "${PORT}")},
}

func TestParseInstruction(t *testing.T) {
	for _, tt := range instructionTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader("FROM base\n" + tt.in + "\n"))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := []Instruction{from, tt.want}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %s\nwant %s", show(got), show(want))
			}
		})
	}
}

// fileTests are whole Dockerfiles.
var fileTests = []struct {
	name string
	in   string
	want []Instruction
}{
	{"minimal", "FROM python", []Instruction{in(1, "FROM", "FROM python", "python")}},
	{"scratch", "from scratch\n", []Instruction{in(1, "FROM", "from scratch", "scratch")}},
	{
		"digest",
		"FROM python@sha256:" + strings.Repeat("ab", 32),
		[]Instruction{in(1, "FROM", "FROM python@sha256:"+strings.Repeat("ab", 32), "python@sha256:"+strings.Repeat("ab", 32))},
	},
	{"quoted image", `FROM "python"`, []Instruction{in(1, "FROM", `FROM "python"`, "python")}},
	{
		"args before from",
		"ARG BASE=python\nARG TAG\nFROM $BASE\nARG TAG\n",
		[]Instruction{
			in(1, "ARG", "ARG BASE=python", "BASE", "python"),
			in(2, "ARG", "ARG TAG", "TAG"),
			in(3, "FROM", "FROM $BASE", "$BASE"),
			in(4, "ARG", "ARG TAG", "TAG"),
		},
	},
	{
		"comments and blank lines",
		"# a comment\n\nFROM x\n  # an indented comment\n\t\n#RUN not this\nRUN a # not a comment\n",
		[]Instruction{in(3, "FROM", "FROM x", "x"), in(7, "RUN", "RUN a # not a comment", "a # not a comment")},
	},
	{
		"continuation",
		"FROM x\nRUN apt-get update && \\\n    apt-get install -y \\\n      curl\nUSER app\n",
		[]Instruction{
			in(1, "FROM", "FROM x", "x"),
			in(2, "RUN", "RUN apt-get update && apt-get install -y curl", "apt-get update &&     apt-get install -y       curl"),
			in(5, "USER", "USER app", "app"),
		},
	},
	{
		"continuation joins without a space",
		"FROM x\nENV PATH=/a:\\\n/b\nRUN echo foo\\\nbar\n",
		[]Instruction{
			in(1, "FROM", "FROM x", "x"),
			in(2, "ENV", "ENV PATH=/a: /b", "PATH", "/a:/b"),
			in(4, "RUN", "RUN echo foo bar", "echo foobar"),
		},
	},
	{
		"comments and blank lines inside a continuation",
		"FROM x\nRUN a \\\n  # a comment \\\n\n   \n  && b \\\n# another\n  && c\n\nENV A=1 \\\n  # c\n  B=2\nWORKDIR /w\n",
		[]Instruction{
			in(1, "FROM", "FROM x", "x"),
			in(2, "RUN", "RUN a && b && c", "a   && b   && c"),
			in(10, "ENV", "ENV A=1 B=2", "A", "1", "B", "2"),
			in(13, "WORKDIR", "WORKDIR /w", "/w"),
		},
	},
	{
		"space after the escape",
		"FROM x\nRUN a \\  \t\n b\n",
		[]Instruction{in(1, "FROM", "FROM x", "x"), in(2, "RUN", "RUN a b", "a  b")},
	},
	{
		"continued keyword",
		"FROM x\nRUN \\\n echo hi\n",
		[]Instruction{in(1, "FROM", "FROM x", "x"), in(2, "RUN", "RUN echo hi", "echo hi")},
	},
	{
		"continuation at end of file",
		"FROM x\nRUN a \\",
		[]Instruction{in(1, "FROM", "FROM x", "x"), in(2, "RUN", "RUN a", "a")},
	},
	{
		"continuation then comments at end of file",
		"FROM x\nRUN a \\\n# c\n\n",
		[]Instruction{in(1, "FROM", "FROM x", "x"), in(2, "RUN", "RUN a", "a")},
	},
	{
		"crlf",
		"FROM x\r\n\r\nRUN a && \\\r\n  b\r\nENV A=\"1 2\"\r\nCMD [\"c\"]\r\n",
		[]Instruction{
			in(1, "FROM", "FROM x", "x"),
			in(3, "RUN", "RUN a && b", "a &&   b"),
			in(5, "ENV", `ENV A="1 2"`, "A", "1 2"),
			jsonIn(6, "CMD", `CMD ["c"]`, "c"),
		},
	},
	{
		"no final newline",
		"FROM x\nCMD c",
		[]Instruction{in(1, "FROM", "FROM x", "x"), in(2, "CMD", "CMD c", "c")},
	},
	{
		"byte order mark",
		"\ufeffFROM x\n",
		[]Instruction{in(1, "FROM", "FROM x", "x")},
	},
	{
		"escape directive",
		"# escape=`\nFROM x\nRUN echo a `\n  b\nENV P=C:\\dir W=`$x Q=\"`\"q\" R=a\\\nWORKDIR C:\\w\n",
		[]Instruction{
			in(2, "FROM", "FROM x", "x"),
			in(3, "RUN", "RUN echo a b", "echo a   b"),
			in(5, "ENV", "ENV P=C:\\dir W=`$x Q=\"`\"q\" R=a\\", "P", `C:\\dir`, "W", `\$x`, "Q", `"q`, "R", `a\\`),
			in(6, "WORKDIR", `WORKDIR C:\w`, `C:\\w`),
		},
	},
	{
		"escape directive loose spelling",
		"#  ESCAPE = `  \nFROM x\nRUN a \\\n",
		[]Instruction{in(2, "FROM", "FROM x", "x"), in(3, "RUN", `RUN a \`, `a \`)},
	},
	{
		"escape directive backslash",
		"# escape=\\\nFROM x\nRUN a \\\n b\n",
		[]Instruction{in(2, "FROM", "FROM x", "x"), in(3, "RUN", "RUN a b", "a  b")},
	},
	{
		"escape directive after syntax directive",
		"# syntax=docker/dockerfile:1\n# escape=`\nFROM x\nRUN a `\n b\n",
		[]Instruction{in(3, "FROM", "FROM x", "x"), in(4, "RUN", "RUN a b", "a  b")},
	},
	{
		"escape directive after a comment is a comment",
		"# hello\n# escape=`\nFROM x\nRUN a \\\n b\n",
		[]Instruction{in(3, "FROM", "FROM x", "x"), in(4, "RUN", "RUN a b", "a  b")},
	},
	{
		"escape directive after an unknown directive is a comment",
		"# foo=bar\n# escape=`\nFROM x\nRUN a \\\n b\n",
		[]Instruction{in(3, "FROM", "FROM x", "x"), in(4, "RUN", "RUN a b", "a  b")},
	},
	{
		"escape directive after a blank line is a comment",
		"\n# escape=`\nFROM x\nRUN a \\\n b\n",
		[]Instruction{in(3, "FROM", "FROM x", "x"), in(4, "RUN", "RUN a b", "a  b")},
	},
	{
		"escape directive after an instruction is a comment",
		"FROM x\n# escape=`\nRUN a \\\n b\n",
		[]Instruction{in(1, "FROM", "FROM x", "x"), in(3, "RUN", "RUN a b", "a  b")},
	},
	{
		"second escape directive after a comment is a comment",
		"# escape=`\n# hi\n# escape=x\nFROM x\n",
		[]Instruction{in(4, "FROM", "FROM x", "x")},
	},
	{
		"full",
		`# syntax=docker/dockerfile:1
ARG PY=python
FROM ${PY}
LABEL org.opencontainers.image.title="demo app"
ENV APP_HOME=/app \
    PIP_NO_CACHE_DIR=1
WORKDIR $APP_HOME
COPY --chown=app:app requirements.txt ./
RUN pip install -r requirements.txt \
 && rm -rf /root/.cache
COPY --chmod=755 . .
USER app
EXPOSE 8000
ENTRYPOINT ["python", "-m", "app"]
CMD ["--port", "8000"]
`,
		[]Instruction{
			in(2, "ARG", "ARG PY=python", "PY", "python"),
			in(3, "FROM", "FROM ${PY}", "${PY}"),
			in(4, "LABEL", `LABEL org.opencontainers.image.title="demo app"`, "org.opencontainers.image.title", "demo app"),
			in(5, "ENV", "ENV APP_HOME=/app PIP_NO_CACHE_DIR=1", "APP_HOME", "/app", "PIP_NO_CACHE_DIR", "1"),
			in(7, "WORKDIR", "WORKDIR $APP_HOME", "$APP_HOME"),
			withFlags(in(8, "COPY", "COPY --chown=app:app requirements.txt ./", "requirements.txt", "./"), "chown", "app:app"),
			in(9, "RUN", "RUN pip install -r requirements.txt && rm -rf /root/.cache", "pip install -r requirements.txt  && rm -rf /root/.cache"),
			withFlags(in(11, "COPY", "COPY --chmod=755 . .", ".", "."), "chmod", "755"),
			in(12, "USER", "USER app", "app"),
			in(13, "EXPOSE", "EXPOSE 8000", "8000"),
			jsonIn(14, "ENTRYPOINT", `ENTRYPOINT ["python", "-m", "app"]`, "python", "-m", "app"),
			jsonIn(15, "CMD", `CMD ["--port", "8000"]`, "--port", "8000"),
		},
	},
}

func TestParseFile(t *testing.T) {
	for _, tt := range fileTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tt.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %s\nwant %s", show(got), show(tt.want))
			}
		})
	}
}

// supportedList is how errors list the supported instructions.
const supportedList = "(supported: FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, EXPOSE, CMD, ENTRYPOINT, LABEL)"

// errorTests are Dockerfiles Parse rejects. line is the line the error names (0: none); want is in
// the message.
var errorTests = []struct {
	name string
	in   string
	line int
	want string
}{
	// The file as a whole.
	{"empty", "", 0, "Dockerfile has no instructions"},
	{"only comments", "# a\n\n   \n# escape=`\n", 0, "Dockerfile has no instructions"},
	{"only directive", "# escape=`", 0, "Dockerfile has no instructions"},
	{"only args", "ARG A\n\nARG B=1\n", 3, "the Dockerfile ends before its FROM"},

	// Order and stages.
	{"run first", "RUN x\n", 1, "the first instruction must be FROM (only ARG may come before it), not RUN"},
	{"env before from", "ARG A\nENV B=1\nFROM x", 2, "the first instruction must be FROM"},
	{"two froms", "FROM a\nRUN x\nFROM b", 3, "only one FROM (multi-stage builds are not supported)"},
	{"from as", "FROM a AS build", 1, "multi-stage builds are not supported"},
	{"from as lower case", "FROM a as build", 1, "multi-stage builds are not supported"},
	{"from platform", "FROM --platform=linux/amd64 a", 1, "FROM --platform is not supported"},
	{"from nothing", "FROM", 1, "FROM takes one argument, the image"},
	{"from two words", "FROM a b", 1, "FROM takes one argument, the image"},
	{"from four words", "FROM a AS b c", 1, "FROM takes one argument, the image"},
	{"from unterminated quote", `FROM "a`, 1, "unterminated quote"},
	{"from bad substitution", `FROM ${A`, 1, "unterminated ${"},
	{"copy from", "FROM x\nCOPY --from=build /a /b", 2, "COPY --from is not supported (multi-stage builds are not supported)"},
	{"add from", "FROM x\nADD --from=build /a /b", 2, "multi-stage builds are not supported"},

	// Instructions.
	{"healthcheck", "FROM x\nHEALTHCHECK CMD true", 2, "HEALTHCHECK is not supported by airlock template build " + supportedList},
	{"onbuild", "FROM x\nONBUILD RUN x", 2, "ONBUILD is not supported by airlock template build"},
	{"shell", "FROM x\nSHELL [\"bash\", \"-c\"]", 2, "SHELL is not supported by airlock template build"},
	{"stopsignal", "FROM x\nSTOPSIGNAL SIGTERM", 2, "STOPSIGNAL is not supported by airlock template build"},
	{"volume lower case", "FROM x\nvolume /data", 2, "VOLUME is not supported by airlock template build"},
	{"maintainer", "FROM x\nMAINTAINER me", 2, "MAINTAINER is not supported by airlock template build"},
	{"unsupported before from", "HEALTHCHECK NONE\nFROM x", 1, "HEALTHCHECK is not supported"},
	{"unknown", "FROM x\nFOO bar", 2, `unknown instruction "FOO"`},
	{"unknown lower case", "FROM x\nfoo", 2, `unknown instruction "foo"`},
	{"unknown first", "FOO", 1, `unknown instruction "FOO"`},
	{"unknown non-ascii", "FROM x\nRÜN a", 2, `unknown instruction "RÜN"`},
	{"unknown long s", "FROM x\nUſER a", 2, `unknown instruction "UſER"`},
	{"json without keyword", "FROM x\n[\"a\"]", 2, `unknown instruction "[\"a\"]"`},
	{"keyword glued to json", "FROM x\nCMD[\"a\"]", 2, `unknown instruction "CMD[\"a\"]"`},

	// Heredocs.
	{"heredoc run", "FROM x\nRUN <<EOF\necho hi\nEOF\n", 2, "heredocs are not supported"},
	{"heredoc run after command", "FROM x\nRUN python3 <<EOF\nprint(1)\nEOF", 2, "heredocs are not supported"},
	{"heredoc dash", "FROM x\nRUN cat <<-EOF >/x\n\tEOF", 2, "heredocs are not supported"},
	{"heredoc quoted name", "FROM x\nRUN cat <<'EOF'\nEOF", 2, "heredocs are not supported"},
	{"heredoc fd", "FROM x\nRUN cat 3<<EOF\nEOF", 2, "heredocs are not supported"},
	{"heredoc continued", "FROM x\nRUN \\\n  cat <<EOF\nEOF", 2, "heredocs are not supported"},
	{"heredoc copy", "FROM x\nCOPY <<EOF /x\nhi\nEOF", 2, "heredocs are not supported"},
	{"heredoc add", "FROM x\nADD <<EOF /x\nhi\nEOF", 2, "heredocs are not supported"},

	// RUN, CMD, ENTRYPOINT.
	{"run empty", "FROM x\nRUN", 2, "RUN needs a command"},
	{"run spaces", "FROM x\nRUN   \t", 2, "RUN needs a command"},
	{"run empty json", "FROM x\nRUN []", 2, "RUN [] has no command"},
	{"run mount", "FROM x\nRUN --mount=type=cache,target=/root/.cache pip install x", 2, "RUN --mount is not supported by airlock template build"},
	{"run network", "FROM x\nRUN --network=none true", 2, "RUN --network is not supported"},
	{"run security", "FROM x\nRUN --security=insecure true", 2, "RUN --security is not supported"},
	{"cmd empty", "FROM x\nCMD", 2, "CMD needs a command (CMD [] for none)"},
	{"entrypoint empty", "FROM x\nENTRYPOINT ", 2, "ENTRYPOINT needs a command"},
	{"cmd flag", "FROM x\nCMD --help", 2, "CMD --help is not supported"},

	// COPY, ADD.
	{"copy link", "FROM x\nCOPY --link a b", 2, "COPY --link is not supported by airlock template build"},
	{"copy parents", "FROM x\nCOPY --parents a b", 2, "COPY --parents is not supported"},
	{"copy exclude", "FROM x\nCOPY --exclude=*.md a b", 2, "COPY --exclude is not supported"},
	{"add checksum", "FROM x\nADD --checksum=sha256:00 a b", 2, "ADD --checksum is not supported"},
	{"add keep git dir", "FROM x\nADD --keep-git-dir=true a b", 2, "ADD --keep-git-dir is not supported"},
	{"copy bare --", "FROM x\nCOPY --=x a b", 2, "COPY -- is not supported"},
	{"copy chown empty", "FROM x\nCOPY --chown= a b", 2, "COPY --chown needs a value"},
	{"copy chown no value", "FROM x\nCOPY --chown a b", 2, "COPY --chown needs a value"},
	{"copy chown no user", "FROM x\nCOPY --chown=:g a b", 2, "COPY --chown=:g: no user"},
	{"copy chown empty group", "FROM x\nCOPY --chown=u: a b", 2, "want USER or USER:GROUP"},
	{"copy chown two colons", "FROM x\nCOPY --chown=u:g:h a b", 2, "want USER or USER:GROUP"},
	{"copy chown bad substitution", "FROM x\nCOPY --chown=${U a b", 2, "unterminated ${"},
	{"copy chmod 8", "FROM x\nCOPY --chmod=789 a b", 2, "COPY --chmod=789: want an octal mode, at most 7777"},
	{"copy chmod letters", "FROM x\nCOPY --chmod=rwx a b", 2, "want an octal mode"},
	{"copy chmod too big", "FROM x\nCOPY --chmod=17777 a b", 2, "want an octal mode"},
	{"copy chmod huge", "FROM x\nCOPY --chmod=777777777777777777777777 a b", 2, "want an octal mode"},
	{"copy chmod sign", "FROM x\nCOPY --chmod=+x a b", 2, "want an octal mode"},
	{"copy chmod hex", "FROM x\nCOPY --chmod=0x1ff a b", 2, "want an octal mode"},
	{"copy chmod var", "FROM x\nCOPY --chmod=$M a b", 2, "want an octal mode"},
	{"copy chmod twice", "FROM x\nCOPY --chmod=755 --chmod=644 a b", 2, "COPY --chmod is given twice"},
	{"copy one arg", "FROM x\nCOPY a", 2, "COPY needs a source and a destination"},
	{"copy no arg", "FROM x\nCOPY", 2, "COPY needs a source and a destination"},
	{"copy flags only", "FROM x\nCOPY --chown=a", 2, "COPY needs a source and a destination"},
	{"copy json one arg", `FROM x` + "\n" + `COPY ["a"]`, 2, "COPY needs a source and a destination"},
	{"add one arg", "FROM x\nADD a", 2, "ADD needs a source and a destination"},
	{"copy unterminated quote", "FROM x\nCOPY \"a b /c", 2, "COPY: unterminated quote"},
	{"copy bad substitution", "FROM x\nCOPY ${A:?x} /c", 2, `unsupported modifier ":?"`},
	{"copy json bad substitution", "FROM x\nCOPY [\"${\", \"/c\"]", 2, "unterminated ${"},
	{"add http", "FROM x\nADD http://example.com/a.tgz /a", 2, "ADD from a URL is not supported; download it in a RUN step under the build's --allow policy"},
	{"add https", "FROM x\nADD https://example.com/a /a", 2, "ADD from a URL is not supported"},
	{"add url upper case", "FROM x\nADD HTTPS://example.com/a /a", 2, "ADD from a URL is not supported"},
	{"add url second", "FROM x\nADD a https://example.com/b /dst/", 2, "ADD from a URL is not supported"},
	{"add url json", "FROM x\nADD [\"https://example.com/b\", \"/dst\"]", 2, "ADD from a URL is not supported"},
	{"add git", "FROM x\nADD git@github.com:a/b.git /src", 2, "ADD from a URL is not supported"},

	// ENV, LABEL, ARG.
	{"env empty", "FROM x\nENV", 2, "ENV needs KEY=VALUE"},
	{"env no value", "FROM x\nENV A", 2, "ENV A needs a value (ENV A=VALUE)"},
	{"env mixed", "FROM x\nENV A=1 B", 2, `ENV: "B" is not KEY=VALUE`},
	{"env digit name", "FROM x\nENV 1A=x", 2, `ENV: bad variable name "1A"`},
	{"env dash name", "FROM x\nENV A-B=x", 2, `ENV: bad variable name "A-B"`},
	{"env empty name", "FROM x\nENV =x", 2, `ENV: bad variable name ""`},
	{"env dollar name", "FROM x\nENV $A=x", 2, `ENV: bad variable name "$A"`},
	{"env legacy bad name", "FROM x\nENV A.B c", 2, `ENV: bad variable name "A.B"`},
	{"env unterminated double", "FROM x\nENV A=\"x", 2, "ENV: unterminated quote"},
	{"env unterminated single", "FROM x\nENV A='x y", 2, "ENV: unterminated quote"},
	{"env unterminated legacy", "FROM x\nENV A \"x y", 2, "ENV: unterminated quote"},
	{"env unterminated brace", "FROM x\nENV A=${X", 2, "ENV: unterminated ${"},
	{"env bad modifier", "FROM x\nENV A=${X:?required}", 2, `ENV: unsupported modifier ":?"`},
	{"env bad name in braces", "FROM x\nENV A=${1}", 2, "ENV: bad variable name"},
	{"env flag", "FROM x\nENV --foo=bar A=1", 2, "ENV --foo is not supported"},
	{"label empty", "FROM x\nLABEL", 2, "LABEL needs KEY=VALUE"},
	{"label no equals", "FROM x\nLABEL a", 2, `LABEL: "a" is not KEY=VALUE`},
	{"label legacy", "FROM x\nLABEL a b", 2, `LABEL: "a" is not KEY=VALUE`},
	{"label empty key", "FROM x\nLABEL =v", 2, "LABEL: empty key"},
	{"label unterminated", "FROM x\nLABEL a=\"x", 2, "LABEL: unterminated quote"},
	{"arg empty", "FROM x\nARG", 2, "ARG needs a name"},
	{"arg two", "FROM x\nARG A B", 2, "one ARG per instruction (write ARG A, then ARG B)"},
	{"arg two defaults", "FROM x\nARG A=1 B=2", 2, "one ARG per instruction"},
	{"arg bad name", "FROM x\nARG 9", 2, `ARG: bad variable name "9"`},
	{"arg bad name default", "FROM x\nARG a-b=1", 2, `ARG: bad variable name "a-b"`},
	{"arg unterminated", "FROM x\nARG A=\"1", 2, "ARG: unterminated quote"},
	{"arg bad default", "FROM x\nARG A=${", 2, "ARG: unterminated ${"},

	// WORKDIR, USER, EXPOSE.
	{"workdir empty", "FROM x\nWORKDIR", 2, "WORKDIR needs a directory"},
	{"workdir unterminated", "FROM x\nWORKDIR \"/a", 2, "WORKDIR: unterminated quote"},
	{"workdir bad substitution", "FROM x\nWORKDIR ${A/x/y}", 2, `WORKDIR: unsupported modifier "/"`},
	{"user empty", "FROM x\nUSER", 2, "USER takes one argument, USER[:GROUP]"},
	{"user two", "FROM x\nUSER a b", 2, "USER takes one argument"},
	{"user unterminated", "FROM x\nUSER 'a", 2, "USER: unterminated quote"},
	{"expose empty", "FROM x\nEXPOSE", 2, "EXPOSE needs a port"},
	{"expose unterminated", "FROM x\nEXPOSE \"80", 2, "EXPOSE: unterminated quote"},

	// Line numbers.
	{"line after continuations", "FROM x\n\n# c\nRUN a \\\n  b \\\n  # c \\\n\n  c\nBAD", 9, `unknown instruction "BAD"`},
	{"line of a continued instruction", "FROM x\nENV A=1 \\\n  # c\n  B", 2, `"B" is not KEY=VALUE`},
	{"line after a continued keyword", "FROM x\nRUN a\nFOO \\\n bar", 3, `unknown instruction "FOO"`},
	{"line crlf", "FROM x\r\n\r\nFOO\r\n", 3, `unknown instruction "FOO"`},
	{"line with directive", "# escape=`\nFROM x\nRUN a `\n b\nFOO", 5, `unknown instruction "FOO"`},
	{"line with bom", "\ufeff\nFROM x\nFOO", 3, `unknown instruction "FOO"`},

	// Directives.
	{"escape directive bad", "# escape=x\nFROM x", 1, "escape directive \"x\": want \\ or `"},
	{"escape directive empty", "# escape=\nFROM x", 1, `escape directive ""`},
	{"escape directive two chars", "# escape=``\nFROM x", 1, "escape directive \"``\""},
	{"escape directive twice", "# escape=`\n# escape=\\\nFROM x", 2, "the escape directive is given twice"},
}

func TestParseError(t *testing.T) {
	for _, tt := range errorTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tt.in))
			if err == nil {
				t.Fatalf("Parse: no error; got %s", show(got))
			}
			if got != nil {
				t.Errorf("Parse returned instructions with its error: %s", show(got))
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error %q does not wrap ErrInvalidArgument", err)
			}
			msg := err.Error()
			if tt.line > 0 {
				if prefix := fmt.Sprintf("line %d: ", tt.line); !strings.HasPrefix(msg, prefix) {
					t.Errorf("got %q; want it to start with %q", msg, prefix)
				}
			} else if strings.HasPrefix(msg, "line ") {
				t.Errorf("got %q; want no line", msg)
			}
			if !strings.Contains(msg, tt.want) {
				t.Errorf("got %q; want it to contain %q", msg, tt.want)
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	head := "FROM x\n#"
	full := head + strings.Repeat("a", maxSize-len(head))
	if _, err := Parse(strings.NewReader(full)); err != nil {
		t.Errorf("Parse of a Dockerfile of exactly 1 MiB: %v", err)
	}
	_, err := Parse(strings.NewReader(full + "a"))
	if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "Dockerfile is over 1 MiB") {
		t.Errorf("Parse of a Dockerfile over 1 MiB: got %v; want Dockerfile is over 1 MiB", err)
	}
}

func TestParseLong(t *testing.T) {
	// Big instructions, many lines: Parse stays linear (this would time out otherwise).
	var b strings.Builder
	b.WriteString("FROM x\nRUN true")
	for b.Len() < maxSize-100 {
		b.WriteString(" \\\n && true")
	}
	b.WriteString("\nENV A=")
	got, err := Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(got) != 3 || got[2].Line != strings.Count(b.String(), "\n")+1 {
		t.Errorf("got %d instructions, the last on line %d", len(got), got[len(got)-1].Line)
	}

	words := "FROM x\nENV" + strings.Repeat(" A=\"a b\"", (maxSize-20)/8)
	got, err = Parse(strings.NewReader(words))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if n := len(got[1].Args); n != 2*((maxSize-20)/8) {
		t.Errorf("got %d ENV arguments; want %d", n, 2*((maxSize-20)/8))
	}
}

func TestParseReadError(t *testing.T) {
	errRead := errors.New("disk on fire")
	_, err := Parse(iotest.ErrReader(errRead))
	if !errors.Is(err, errRead) {
		t.Errorf("got %v; want it to wrap %v", err, errRead)
	}
}

// env is the lookup of the Expand tests.
func env(name string) (string, bool) {
	v, ok := map[string]string{
		"A":     "a",
		"E":     "",
		"SP":    "x y",
		"D":     "$A ${A}",
		"HOME":  "/root",
		"_x1":   "underscore",
		"SLASH": `\`,
	}[name]
	return v, ok
}

var expandTests = []struct {
	in, want string
}{
	{"", ""},
	{"plain text", "plain text"},
	{"$A", "a"},
	{"${A}", "a"},
	{"$A$A", "aa"},
	{"${A}b", "ab"},
	{"$Ab", ""},
	{"$A-b", "a-b"},
	{"$A.b", "a.b"},
	{"x$A/y", "xa/y"},
	{"$_x1 ${_x1}", "underscore underscore"},
	{"$SP", "x y"},
	{"$U", ""},
	{"${U}", ""},
	{"$E", ""},
	{"$D", "$A ${A}"}, // values are not expanded again
	{"$SLASH$A", `\a`},
	{"$", "$"},
	{"a$", "a$"},
	{"$1", "$1"},
	{"$ a", "$ a"},
	{"$-", "$-"},
	{"$$", "$$"},
	{"$$A", "$a"},
	{"{A}", "{A}"},
	{"}", "}"},
	{"a}b", "a}b"},
	{"é$A€", "éa€"},
	{`\$A`, "$A"},
	{`\${A}`, "${A}"},
	{`\\`, `\`},
	{`\\$A`, `\a`},
	{`\\\$A`, `\$A`},
	{`\a\n`, `\a\n`},
	{`\`, `\`},
	{`a\`, `a\`},
	{`C:\dir`, `C:\dir`},
	{"${A:-w}", "a"},
	{"${E:-w}", "w"},
	{"${U:-w}", "w"},
	{"${A-w}", "a"},
	{"${E-w}", ""},
	{"${U-w}", "w"},
	{"${A:+w}", "w"},
	{"${E:+w}", ""},
	{"${U:+w}", ""},
	{"${A+w}", "w"},
	{"${E+w}", "w"},
	{"${U+w}", ""},
	{"${U:-}", ""},
	{"${A:+}", ""},
	{"${U:-a b}", "a b"},
	{"${U:-$A}", "a"},
	{"${U:-${A}}", "a"},
	{"${U:-$A/x}", "a/x"},
	{"${U:-${V:-deep}}", "deep"},
	{"${A:+[${A}]}", "[a]"},
	{"${A:+${U:-${HOME}}/bin}", "/root/bin"},
	{`${U:-\$A}`, "$A"},
	{`${U:-a\\b}`, `a\b`},
	{"${U:-{x}", "{x"},
	{`${U:-\}`, `\`}, // no escape for '}'

	{"${U:-$}", "$"},
	{"pre ${A} mid ${U:-w} post", "pre a mid w post"},
}

func TestExpand(t *testing.T) {
	for _, tt := range expandTests {
		got, err := Expand(tt.in, env)
		if err != nil {
			t.Errorf("Expand(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("Expand(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

func TestExpandNilLookup(t *testing.T) {
	got, err := Expand("[$A][${B:-x}][${C:+y}][${D-z}]", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "[][x][][z]"; got != want {
		t.Errorf("got %q; want %q", got, want)
	}
}

func TestExpandError(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"${", `unterminated ${ in "${"`},
		{"${A", "unterminated ${"},
		{"x ${A y", `unsupported modifier " " (want :-, -, :+ or +) in "${A y"`},
		{"${A:", "unterminated ${"},
		{"${A:-", "unterminated ${"},
		{"${A:-x", "unterminated ${"},
		{"${U:-${A}", "unterminated ${"},
		{"${}", `bad variable name in "${}"`},
		{"${1}", "bad variable name"},
		{"${-x}", "bad variable name"},
		{"${#A}", "bad variable name"},
		{"${ A}", "bad variable name"},
		{"${A:?err}", `unsupported modifier ":?" (want :-, -, :+ or +) in "${A:?err}"`},
		{"${A?err}", `unsupported modifier "?"`},
		{"${A:=x}", `unsupported modifier ":="`},
		{"${A=x}", `unsupported modifier "="`},
		{"${A:1}", `unsupported modifier ":1"`},
		{"${A/a/b}", `unsupported modifier "/"`},
		{"${A//a/b}", `unsupported modifier "/"`},
		{"${A%x}", `unsupported modifier "%"`},
		{"${A#x}", `unsupported modifier "#"`},
		{"${A^^}", `unsupported modifier "^"`},
		{"${A.B}", `unsupported modifier "."`},
		{"${A }", `unsupported modifier " "`},
		{"${A:-${}x}", "bad variable name"},       // in a word that is not used
		{"${U:+${A:?e}}", "unsupported modifier"}, // likewise
		{"${U:-" + strings.Repeat("x", 100), `unterminated ${ in "${U:-` + strings.Repeat("x", 35) + `..."`},
	}
	for _, tt := range tests {
		got, err := Expand(tt.in, env)
		if err == nil {
			t.Errorf("Expand(%q) = %q; want an error", tt.in, got)
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Expand(%q): error %q does not wrap ErrInvalidArgument", tt.in, err)
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Expand(%q): got %q; want it to contain %q", tt.in, err, tt.want)
		}
		if checkSyntax(tt.in) == nil {
			t.Errorf("checkSyntax(%q) = nil; Expand fails", tt.in)
		}
	}
}

func TestExpandNesting(t *testing.T) {
	nest := func(n int) string {
		return strings.Repeat("${U:-", n) + "x" + strings.Repeat("}", n)
	}
	if got, err := Expand(nest(maxNesting), env); err != nil || got != "x" {
		t.Errorf("Expand nested %d deep = %q, %v; want x", maxNesting, got, err)
	}
	_, err := Expand(nest(maxNesting+1), env)
	if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "nested over 64 deep") {
		t.Errorf("Expand nested %d deep: got %v; want nested over 64 deep", maxNesting+1, err)
	}
	// Siblings do not add up.
	many := strings.Repeat(nest(maxNesting), 100)
	if got, err := Expand(many, env); err != nil || got != strings.Repeat("x", 100) {
		t.Errorf("Expand of 100 nested words: %v", err)
	}
}

func TestExpandLimit(t *testing.T) {
	big := strings.Repeat("b", 600<<10)
	lookup := func(name string) (string, bool) { return big, name == "BIG" }
	if got, err := Expand("$BIG", lookup); err != nil || got != big {
		t.Errorf("Expand($BIG): %v", err)
	}
	for _, in := range []string{"$BIG$BIG", "${BIG}${U:-$BIG}", "${BIG:+$BIG$BIG}", strings.Repeat("$BIG", 1<<20)} {
		if _, err := Expand(in, lookup); err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "expansion is over 1 MiB") {
			t.Errorf("Expand(%.20q): got %v; want expansion is over 1 MiB", in, err)
		}
	}
	exact := strings.Repeat("c", maxExpanded-len(big))
	if got, err := Expand(exact+"$BIG", lookup); err != nil || len(got) != maxExpanded {
		t.Errorf("Expand to exactly 1 MiB: %d bytes, %v", len(got), err)
	}
	if _, err := Expand(exact+"$BIG.", lookup); err == nil {
		t.Errorf("Expand to 1 MiB and a byte: no error")
	}
	// An unused word costs nothing.
	if _, err := Expand("${BIG:-"+strings.Repeat("$BIG", 1000)+"}", lookup); err != nil {
		t.Errorf("Expand of an unused word: %v", err)
	}
}

// TestParseThenExpand checks that what Parse gives, expanded, is what Docker gives: quotes and escapes
// resolved once, variables expanded where Docker expands them and not elsewhere.
func TestParseThenExpand(t *testing.T) {
	tests := []struct {
		name, in string // in follows "FROM x\n"; its instruction's last argument is expanded
		want     string
	}{
		{"single quotes", `ENV A='$HOME'`, "$HOME"},
		{"double quotes", `ENV A="$HOME"`, "/root"},
		{"unquoted", `ENV A=$HOME`, "/root"},
		{"braces", `ENV A=${HOME}/bin`, "/root/bin"},
		{"escaped", `ENV A=\$HOME`, "$HOME"},
		{"escaped in double quotes", `ENV A="\$HOME"`, "$HOME"},
		{"escaped in single quotes", `ENV A='\$HOME'`, `\$HOME`},
		{"backslash in single quotes", `ENV A='a\b'`, `a\b`},
		{"escaped backslash", `ENV A=a\\b`, `a\b`},
		{"escaped backslash in double quotes", `ENV A="a\\b"`, `a\b`},
		{"backslash in double quotes", `ENV A="a\b"`, `a\b`},
		{"backslash before a variable", `ENV A="\\$HOME"`, `\/root`},
		{"backslash before an escaped $", `ENV A="\\\$HOME"`, `\$HOME`},
		{"escape outside quotes", `ENV A=a\b`, "ab"},
		{"single quotes in a word", `ENV A=${NOPE:-'$x y'}`, "$x y"},
		{"double quotes in a word", `ENV A=${NOPE:-"$HOME x"}`, "/root x"},
		{"legacy", `ENV A 'x $HOME' "$HOME"`, "x $HOME /root"},
		{"label", `LABEL k="$HOME" l='$HOME'`, "$HOME"},
		{"arg default", `ARG A="${HOME}"`, "/root"},
		{"workdir", `WORKDIR '$x'/"$HOME"`, "$x//root"},
		{"copy", `COPY a '$b'`, "$b"},
		{"copy json", `COPY ["a", "$HOME"]`, "/root"},
		{"user", `USER ${U:-app}`, "app"},
		{"expose", `EXPOSE ${P:-80}/tcp`, "80/tcp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ins, err := Parse(strings.NewReader("FROM x\n" + tt.in))
			if err != nil {
				t.Fatal(err)
			}
			args := ins[1].Args
			got, err := Expand(args[len(args)-1], env)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %q; want %q (Parse gave %q)", got, tt.want, args[len(args)-1])
			}
		})
	}

	// With the backtick escape, a backslash is an ordinary character.
	ins, err := Parse(strings.NewReader("# escape=`\nFROM x\nENV A=C:\\$HOME B=`$HOME C=\"C:\\a\" D='\\\\'"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for j := 1; j < len(ins[1].Args); j += 2 {
		v, err := Expand(ins[1].Args[j], env)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if want := []string{`C:\/root`, "$HOME", `C:\a`, `\\`}; !reflect.DeepEqual(got, want) {
		t.Errorf("backtick escape: got %q; want %q", got, want)
	}
}

// expandable are the instructions whose arguments are in Expand's syntax.
var expandable = map[string]bool{
	"FROM": true, "COPY": true, "ADD": true, "ENV": true, "ARG": true, "WORKDIR": true,
	"USER": true, "EXPOSE": true, "LABEL": true,
}

// lineRE is the start of an error about a line.
var lineRE = regexp.MustCompile(`^line [1-9][0-9]*: `)

// checkParsed checks what Parse returned for in against the guarantees of its documentation.
func checkParsed(t *testing.T, in []byte, ins []Instruction, err error) {
	t.Helper()
	if err != nil {
		if ins != nil {
			t.Fatalf("Parse returned instructions and %v", err)
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("error %q does not wrap ErrInvalidArgument", err)
		}
		msg := err.Error()
		if !lineRE.MatchString(msg) && !strings.HasPrefix(msg, "Dockerfile has no instructions") && !strings.HasPrefix(msg, "Dockerfile is over 1 MiB") {
			t.Fatalf("error %q does not start with line N", msg)
		}
		return
	}
	if len(ins) == 0 {
		t.Fatal("no instructions and no error")
	}
	lines := strings.Count(string(in), "\n") + 1
	froms, prev := 0, 0
	for _, i := range ins {
		if i.Line <= prev || i.Line > lines {
			t.Fatalf("instruction on line %d after line %d, of %d", i.Line, prev, lines)
		}
		prev = i.Line
		if !isSupported(i.Cmd) {
			t.Fatalf("unsupported instruction %q", i.Cmd)
		}
		if kw, _ := cutWord(i.Original); !strings.EqualFold(kw, i.Cmd) {
			t.Fatalf("Original %q is not of a %s", i.Original, i.Cmd)
		}
		switch {
		case i.Cmd == "FROM":
			froms++
		case froms == 0 && i.Cmd != "ARG":
			t.Fatalf("%s before FROM", i.Cmd)
		}
		for name := range i.Flags {
			if (i.Cmd != "COPY" && i.Cmd != "ADD") || (name != "chown" && name != "chmod") {
				t.Fatalf("%s has flag %q", i.Cmd, name)
			}
		}
		n := len(i.Args)
		switch i.Cmd {
		case "FROM", "WORKDIR", "USER":
			if n != 1 {
				t.Fatalf("%s has %d arguments", i.Cmd, n)
			}
		case "RUN":
			if n == 0 || !i.JSON && (n != 1 || i.Args[0] == "") {
				t.Fatalf("RUN has arguments %q", i.Args)
			}
		case "CMD", "ENTRYPOINT":
			if !i.JSON && (n != 1 || i.Args[0] == "") {
				t.Fatalf("%s has arguments %q", i.Cmd, i.Args)
			}
		case "COPY", "ADD":
			if n < 2 {
				t.Fatalf("%s has %d arguments", i.Cmd, n)
			}
		case "ENV", "LABEL":
			if n == 0 || n%2 != 0 {
				t.Fatalf("%s has %d arguments", i.Cmd, n)
			}
		case "ARG":
			if n != 1 && n != 2 {
				t.Fatalf("ARG has %d arguments", n)
			}
		case "EXPOSE":
			if n == 0 {
				t.Fatal("EXPOSE has no arguments")
			}
		}
		if expandable[i.Cmd] {
			for _, a := range i.Args {
				if _, err := Expand(a, nil); err != nil {
					t.Fatalf("%s argument %q: Expand: %v", i.Cmd, a, err)
				}
			}
		}
	}
	if froms != 1 {
		t.Fatalf("%d FROMs", froms)
	}
}

func FuzzParse(f *testing.F) {
	for _, tt := range instructionTests {
		f.Add([]byte("FROM base\n" + tt.in))
	}
	for _, tt := range fileTests {
		f.Add([]byte(tt.in))
	}
	for _, tt := range errorTests {
		f.Add([]byte(tt.in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		ins, err := Parse(strings.NewReader(string(in)))
		checkParsed(t, in, ins, err)
	})
}

func FuzzExpand(f *testing.F) {
	for _, tt := range expandTests {
		f.Add(tt.in)
	}
	f.Add("${A:?x}")
	f.Add("${U:-${V:+${W-x}}}")
	f.Fuzz(func(t *testing.T, in string) {
		// Every value is one byte, so no result outgrows its input.
		one := func(name string) (string, bool) { return "v", name != "U" }
		got, err := Expand(in, one)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %q does not wrap ErrInvalidArgument", err)
			}
			if checkSyntax(in) == nil {
				t.Fatalf("Expand: %v; checkSyntax: nil", err)
			}
			return
		}
		if err := checkSyntax(in); err != nil {
			t.Fatalf("Expand: ok; checkSyntax: %v", err)
		}
		if len(got) > len(in) {
			t.Fatalf("Expand(%q) = %q, longer", in, got)
		}
		if !strings.Contains(in, "$") && !strings.Contains(in, `\\`) && got != in {
			t.Fatalf("Expand(%q) = %q; want it unchanged", in, got)
		}
	})
}
