package api

import (
	"bufio"
	"errors"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/api/wire"
)

func TestCheckCodeEvent(t *testing.T) {
	for _, tc := range []struct {
		line string
		ok   bool
		want wire.CodeEvent
	}{
		{`{"type":"stdout","text":"hi\n","timestamp":"x","junk":[1]}`, true, wire.CodeEvent{Type: "stdout", Text: "hi\n"}},
		{`{"type":"number_of_executions","execution_count":3}`, true, wire.CodeEvent{Type: "number_of_executions", ExecutionCount: 3}},
		{`{"type":"number_of_executions"}`, false, wire.CodeEvent{}},
		{`{"type":"number_of_executions","execution_count":-1}`, false, wire.CodeEvent{}},
		{`{"type":"result","is_main_result":true,"text":"42","png":"iVBORw0KGgo=\n"}`, true,
			wire.CodeEvent{Type: "result", Text: "42", CodeResult: wire.CodeResult{IsMainResult: true, PNG: "iVBORw0KGgo=\n"}}},
		{`{"type":"result","png":"<script>"}`, false, wire.CodeEvent{}},
		{`{"type":"result","text":7}`, false, wire.CodeEvent{}},
		{`{"type":"error","name":"ValueError","value":"v","traceback":"tb"}`, true,
			wire.CodeEvent{Type: "error", CodeError: wire.CodeError{Name: "ValueError", Value: "v", Traceback: "tb"}}},
		{`{"type":"something new"}`, true, wire.CodeEvent{}},
		{`{"type":"end_of_execution"}`, true, wire.CodeEvent{Type: "end_of_execution"}},
		{`not json`, false, wire.CodeEvent{}},
		{"{\"type\":\"stdout\",\"text\":\"\xff\"}", false, wire.CodeEvent{}},
		{`[1]`, false, wire.CodeEvent{}},
	} {
		got, ok := checkCodeEvent([]byte(tc.line))
		if ok != tc.ok || ok && (got.Type != tc.want.Type || got.Text != tc.want.Text || got.ExecutionCount != tc.want.ExecutionCount ||
			got.IsMainResult != tc.want.IsMainResult || got.PNG != tc.want.PNG || got.CodeError != tc.want.CodeError) {
			t.Errorf("checkCodeEvent(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
	extra := `{"type":"result","extra":{`
	for i := range maxCodeExtra + 1 {
		if i > 0 {
			extra += ","
		}
		extra += `"m` + strings.Repeat("x", i) + `":1`
	}
	if _, ok := checkCodeEvent([]byte(extra + "}}")); ok {
		t.Errorf("a result with %d extra representations was passed on", maxCodeExtra+1)
	}
}

func TestReadBoundedLine(t *testing.T) {
	br := bufio.NewReaderSize(&boundedReader{r: strings.NewReader("short\n" + strings.Repeat("a", 100) + "\nrest"), left: 1 << 20}, 16)
	if l, err := readBoundedLine(br, 50); string(l) != "short" || err != nil {
		t.Fatalf("first line: %q %v", l, err)
	}
	var tl errTooLong
	if _, err := readBoundedLine(br, 50); !errors.As(err, &tl) {
		t.Fatalf("a line over the bound: %v", err)
	}
	br = bufio.NewReaderSize(&boundedReader{r: strings.NewReader("a\nno end"), left: 1 << 20}, 16)
	readBoundedLine(br, 50)
	if _, err := readBoundedLine(br, 50); err == nil || errors.As(err, &tl) {
		t.Fatalf("a last line without its newline: %v; want unexpected EOF", err)
	}
	br = bufio.NewReaderSize(&boundedReader{r: strings.NewReader(strings.Repeat("line\n", 100)), left: 100}, 16)
	var err error
	for err == nil {
		_, err = readBoundedLine(br, 50)
	}
	if !errors.As(err, &tl) || !strings.Contains(err.Error(), "of output") {
		t.Fatalf("past the output's bound: %v", err)
	}
}
