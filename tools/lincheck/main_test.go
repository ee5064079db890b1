package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCommand(args ...string) (int, string, string) {
	return runCommandWithStdin("", args...)
}

func runCommandWithStdin(stdin string, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	status := run(args, strings.NewReader(stdin), &stdout, &stderr)
	return status, stdout.String(), stderr.String()
}

// Every file in testdata/ is checked; its name says the verdict expected.
func TestTestdataHistoriesGetTheVerdictTheirNameSays(t *testing.T) {
	cases := []struct {
		file   string
		status int
		output []string // substrings of stdout (or stderr, for bad input)
	}{
		{"linearizable_sequential.json", exitLinearizable,
			[]string{"11 operations, 2 keys, 1 client: linearizable in"}},
		{"linearizable_concurrent.json", exitLinearizable, []string{"linearizable in"}},
		{"linearizable_unknown_outcome.json", exitLinearizable, []string{
			"11 operations (3 writes with unknown outcome, 1 read with unknown outcome dropped)",
			"linearizable in"}},
		{"not_linearizable_overwritten_read.json", exitNotLinearizable, []string{
			"NOT LINEARIZABLE (1 of 2 keys)",
			`key "k": 3 operations, longest linearizable prefix 2, state after it "b"`,
			`operation 3, client 2, [50, 60]: get("k") = "a"`}},
		{"not_linearizable_stale_read.json", exitNotLinearizable, []string{
			`key "k": 4 operations`, `get("k") = "old"`}},
		{"not_linearizable_unknown_outcome.json", exitNotLinearizable, []string{
			"1 write with unknown outcome", `key "k"`}},
		{"not_linearizable_cas.json", exitNotLinearizable, []string{
			`key "lock"`, `cas("lock", absent -> "two") = swapped`}},
		{"bad_malformed.json", exitBadInput, []string{"malformed history JSON", "line 3"}},
		{"bad_unknown_op.json", exitBadInput, []string{`operation 0: unknown op "increment"`}},
		{"bad_return_before_invoke.json", exitBadInput, []string{"operation 0: returns before it was invoked"}},
		{"bad_missing_field.json", exitBadInput, []string{`operation 1: get needs field "result"`}},
	}
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(cases) {
		t.Errorf("testdata has %d files and this test knows %d: add the new ones here", len(files), len(cases))
	}
	for _, c := range cases {
		status, stdout, stderr := runCommand(filepath.Join("testdata", c.file))
		if status != c.status {
			t.Errorf("%s: exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", c.file, status, c.status, stdout, stderr)
			continue
		}
		for _, want := range c.output {
			if !strings.Contains(stdout+stderr, want) {
				t.Errorf("%s: output lacks %q\nstdout:\n%s\nstderr:\n%s", c.file, want, stdout, stderr)
			}
		}
		if c.status == exitBadInput && stdout != "" {
			t.Errorf("%s: bad input printed to stdout: %s", c.file, stdout)
		}
		if c.status != exitBadInput && !strings.HasPrefix(stdout, "lincheck: ") {
			t.Errorf("%s: stdout does not start with the summary line: %s", c.file, stdout)
		}
	}
}

func TestHTMLVisualizationIsWrittenForAViolation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "violation.html")
	status, stdout, stderr := runCommand("--html", path, "testdata/not_linearizable_stale_read.json")
	if status != exitNotLinearizable {
		t.Fatalf("exit status %d, want %d\n%s%s", status, exitNotLinearizable, stdout, stderr)
	}
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(page, []byte("<html")) || !bytes.Contains(page, []byte(`get(\"k\") = \"old\"`)) {
		t.Errorf("visualization lacks the page or the failing operation (%d bytes)", len(page))
	}
	// Flags may also follow the file.
	status, _, _ = runCommand("testdata/linearizable_sequential.json", "--html", path, "--timeout", "5s")
	if status != exitLinearizable {
		t.Errorf("flags after the file: exit status %d", status)
	}
}

func TestUsageErrorsExitWithStatusTwo(t *testing.T) {
	cases := [][]string{
		{},
		{"a.json", "b.json"},
		{"--timeout", "soon", "testdata/linearizable_sequential.json"},
		{"--timeout", "-1s", "testdata/linearizable_sequential.json"},
		{"--no-such-flag", "testdata/linearizable_sequential.json"},
		{"testdata/does-not-exist.json"},
		{"--html", filepath.Join("no-such-directory", "x.html"), "testdata/linearizable_sequential.json"},
		{"gen", "--keys", "0"},
		{"gen", "extra"},
	}
	for _, args := range cases {
		status, _, stderr := runCommand(args...)
		if status != exitBadInput {
			t.Errorf("%q: exit status %d, want %d", args, status, exitBadInput)
		}
		if stderr == "" {
			t.Errorf("%q: nothing on stderr", args)
		}
	}
}

func TestHistoryFromStdin(t *testing.T) {
	data, err := os.ReadFile("testdata/not_linearizable_cas.json")
	if err != nil {
		t.Fatal(err)
	}
	status, stdout, _ := runCommandWithStdin(string(data), "--quiet", "-")
	if status != exitNotLinearizable {
		t.Fatalf("exit status %d, want %d", status, exitNotLinearizable)
	}
	if lines := strings.Count(stdout, "\n"); lines != 1 {
		t.Errorf("--quiet printed %d lines, want 1:\n%s", lines, stdout)
	}
}

func TestGeneratedHistoryRoundTripsThroughTheCommand(t *testing.T) {
	status, history, stderr := runCommand("gen", "--ops", "2000", "--keys", "5", "--clients", "8", "--seed", "9")
	if status != 0 {
		t.Fatalf("gen: exit status %d: %s", status, stderr)
	}
	path := filepath.Join(t.TempDir(), "history.json")
	if err := os.WriteFile(path, []byte(history), 0o644); err != nil {
		t.Fatal(err)
	}
	status, stdout, stderr := runCommand(path)
	if status != exitLinearizable {
		t.Fatalf("exit status %d\n%s%s", status, stdout, stderr)
	}
	if !strings.Contains(stdout, "[lincheck gen --ops 2000 --keys 5 --clients 8 --seed 9") ||
		!strings.Contains(stdout, "2000 operations") {
		t.Errorf("summary lacks the source or the count: %s", stdout)
	}
}
