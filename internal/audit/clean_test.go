package audit

import "testing"

func TestCleanText(t *testing.T) {
	for in, want := range map[string]string{"sb_ok": "sb_ok", "a\x00b": `a\x00b`, "bad\xffbyte": "bad\uFFFDbyte", "": ""} {
		if got := cleanText(in); got != want {
			t.Errorf("cleanText(%q) = %q; want %q", in, got, want)
		}
	}
}
