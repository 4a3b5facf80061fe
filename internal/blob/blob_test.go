package blob_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/blob"
	"github.com/airlockrun/airlock/internal/errdefs"
)

func TestValidateKey(t *testing.T) {
	seg := strings.Repeat("s", blob.MaxSegmentSize)
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"a", true},
		{"tenants/t-1/chunks/ab/ab01", true},
		{"A.Z_0-9/...x/x..", true},
		{seg + "/" + seg, true},
		{"", false},
		{"/a", false},
		{"a/", false},
		{"a//b", false},
		{".", false},
		{"..", false},
		{"a/./b", false},
		{"a/../b", false},
		{"a b", false},
		{"a+b", false},
		{"a@b", false},
		{"é", false},
		{seg + "s", false},
		{strings.Repeat(seg+"/", 5) + strings.Repeat("s", 20), false}, // 1025 bytes
	} {
		err := blob.ValidateKey(tc.key)
		if tc.ok && err != nil {
			t.Errorf("ValidateKey(%q) = %v; want nil", tc.key, err)
		}
		if !tc.ok && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ValidateKey(%q) = %v; want ErrInvalidArgument", tc.key, err)
		}
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"", true},
		{"a", true},
		{"a/", true},
		{"a/b/.", true}, // may start ".x"
		{"a/b/..", true},
		{"/", false},
		{"a//", false},
		{"./", false},
		{"a/../", false},
		{"a b", false},
		{strings.Repeat("s", blob.MaxSegmentSize+1), false},
	} {
		err := blob.ValidatePrefix(tc.prefix)
		if tc.ok && err != nil {
			t.Errorf("ValidatePrefix(%q) = %v; want nil", tc.prefix, err)
		}
		if !tc.ok && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ValidatePrefix(%q) = %v; want ErrInvalidArgument", tc.prefix, err)
		}
	}
}
