package spawnd_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// normalized drops each line's indentation and the blank lines, so a
// README block matches the body of an example however deep it sits.
func normalized(text string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

func TestReadmeShowsOnlyTheseExamples(t *testing.T) {
	// This README, and the repository's page on its clients. That page
	// is outside the module: a copy of the module elsewhere (vendored into
	// another project) has only the README.
	for _, doc := range []string{"README.md", "../../docs/clients.md"} {
		text, err := os.ReadFile(doc)
		if doc != "README.md" && os.IsNotExist(err) {
			t.Logf("%s is not here (not in a spawnd checkout): not checked", doc)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		examples, err := os.ReadFile("example_test.go")
		if err != nil {
			t.Fatal(err)
		}
		blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(text), -1)
		if len(blocks) == 0 {
			t.Fatalf("%s has no ```go block", doc)
		}
		all := normalized(string(examples))
		for _, b := range blocks {
			if !strings.Contains(all, normalized(b[1])) {
				t.Errorf("this %s block is not the body of an example in example_test.go (so it is not compiled or run):\n%s", doc, b[1])
			}
		}
	}
}
