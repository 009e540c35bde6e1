package wire

import "testing"

func TestToolUseID(t *testing.T) {
	for _, tc := range []struct{ desc, in, want string }{
		{"an id of the Messages API stays", "toolu_01A-b", "toolu_01A-b"},
		{"another format's characters become _", "call:1/x.y", "call_1_x_y"},
		{"an empty id gets a name", "", "call"},
		{"letters outside ASCII become _", "idé", "id_"},
	} {
		if got := ToolUseID(tc.in); got != tc.want {
			t.Errorf("%s: ToolUseID(%q) = %q, want %q", tc.desc, tc.in, got, tc.want)
		}
	}
}
