package report

import (
	"strings"
	"testing"
)

func TestReplaceSectionAppendsOnce(t *testing.T) {
	orig := "# title\n\nsome text"
	out, err := replaceSection([]byte(orig), "first")
	if err != nil {
		t.Fatal(err)
	}
	want := orig + "\n\n" + Heading + "\n\n" + BeginMarker + "\nfirst\n" + EndMarker + "\n"
	if string(out) != want {
		t.Fatalf("got\n%q\nwant\n%q", out, want)
	}
	// The lead edits around the section; a second run replaces only the
	// marked part.
	edited := "# new title\n\n" + string(out) + "\n## later section\n"
	out2, err := replaceSection([]byte(edited), "second\n")
	if err != nil {
		t.Fatal(err)
	}
	want2 := strings.Replace(edited, "\nfirst\n", "\nsecond\n", 1)
	if string(out2) != want2 {
		t.Fatalf("got\n%q\nwant\n%q", out2, want2)
	}
	if strings.Count(string(out2), Heading) != 1 {
		t.Fatalf("heading duplicated:\n%s", out2)
	}
}

func TestReplaceSectionRefusesHalfMarkers(t *testing.T) {
	for _, in := range []string{"x\n" + BeginMarker + "\ny\n", EndMarker + "\n" + BeginMarker + "\n"} {
		if _, err := replaceSection([]byte(in), "body"); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestRatio(t *testing.T) {
	for _, c := range []struct {
		dq, aq float64
		want   string
	}{
		{100, 50, "2.0×"},
		{1, 250, "0.004× (1/250)"},
		{5, 0, "—"},
		{2500, 10, "250×"},
	} {
		if got := ratio(c.dq, c.aq); got != c.want {
			t.Errorf("ratio(%v, %v) = %q, want %q", c.dq, c.aq, got, c.want)
		}
	}
}
