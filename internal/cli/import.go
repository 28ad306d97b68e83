package cli

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/config"
)

// importProgress is what dq import keeps in FILE.progress after every
// batch, so that an interrupted import resumes where it stopped.
type importProgress struct {
	Version int `json:"version"`
	// Offset is the byte offset after the last line submitted; Line is its
	// number (1-based); PrefixSHA256 is the hash of the file's first Offset
	// bytes: a resume refuses a file whose beginning changed.
	Offset       int64  `json:"offset"`
	Line         int64  `json:"line"`
	PrefixSHA256 string `json:"prefix_sha256"`
	Summary      importSummary
}

// importSummary is the result of an import.
type importSummary struct {
	File      string      `json:"file"`
	Lines     int64       `json:"lines"`
	Blank     int64       `json:"blank"`
	Accepted  int64       `json:"accepted"`
	Created   int64       `json:"created"`
	Unchanged int64       `json:"unchanged"`
	Updated   int64       `json:"updated"`
	Journaled int64       `json:"journaled"`
	Rejected  int64       `json:"rejected"`
	Bad       []badLine   `json:"rejected_lines"`
	Resumed   bool        `json:"resumed,omitempty"`
	Elapsed   jsonSeconds `json:"elapsed_seconds"`
}

// badLine is a rejected line and why.
type badLine struct {
	Line   int64  `json:"line"`
	Code   string `json:"code"`
	Reason string `json:"reason"`
}

type jsonSeconds time.Duration

func (d jsonSeconds) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, time.Duration(d).Seconds(), 'f', 3, 64), nil
}

func (d *jsonSeconds) UnmarshalJSON(b []byte) error {
	f, err := strconv.ParseFloat(string(b), 64)
	*d = jsonSeconds(f * float64(time.Second))
	return err
}

// maxKeptBad bounds the rejected lines kept with their reasons (all are
// counted).
const maxKeptBad = 10000

// importLine is one task line of a batch.
type importLine struct {
	line int64
	body []byte
}

type importer struct {
	api        *apiFlags
	hc         *http.Client
	batch      int
	maxBytes   int
	retries    int
	autoID     bool
	idPrefix   string
	stderr     io.Writer
	bar        *progressBar
	sum        *importSummary
	retryPause time.Duration
}

const importUsage = `Usage: dq import FILE.jsonl [flags]

Schedules the tasks of FILE.jsonl, one task a line in the JSON of POST
/v1/tasks, in batches; an interrupted import resumes where it stopped
(FILE.jsonl.progress). Rejected lines are listed by line number; dq exits
2 when there were some.`

func runImport(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet("import", env)
	withUsage(fs, importUsage)
	api := bindAPI(fs, env)
	batch := fs.Int("batch", 500, "tasks per batch request (the daemon allows 1000 by default)")
	maxBytes := new(int)
	fs.Var(config.NewIntSizeValue(maxBytes, 512<<10), "max-bytes", "bytes per batch request at most, or with a unit: 512KiB, 1MiB (the daemon allows 1MiB by default)")
	restart := fs.Bool("restart", false, "ignore FILE.progress and start from the first line")
	autoID := fs.Bool("auto-id", true, `give lines without an "id" the id imp-<hash of the file's path>-<line>, so that a resumed or repeated import creates no duplicates`)
	retries := fs.Int("retries", 8, "retries of a batch that failed as a whole (daemon unreachable, 5xx)")
	quiet := fs.Bool("quiet", false, "no progress bar")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := api.check(); err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("import: exactly one file expected (dq import FILE.jsonl)")
	}
	if *batch < 1 || *maxBytes < 1024 {
		return errors.New("import: --batch must be positive and --max-bytes at least 1024")
	}
	path := pos[0]
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	defer f.Close()
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	sum := sha256.Sum256([]byte(abs))
	total, err := countLines(f)
	if err != nil {
		return fmt.Errorf("import: count lines: %w", err)
	}

	progPath := path + ".progress"
	prog := importProgress{Version: 1, Summary: importSummary{File: path}}
	h := sha256.New()
	if !*restart {
		if p, ok, err := loadProgress(progPath); err != nil {
			return err
		} else if ok {
			if err := verifyPrefix(f, p, h); err != nil {
				return fmt.Errorf("import: %s does not match %s (%w); run with --restart to import from the first line", path, progPath, err)
			}
			prog = p
			prog.Summary.Resumed = true
			fmt.Fprintf(env.Stderr, "resuming %s after line %d (%s)\n", path, p.Line, progPath)
		}
	}
	if _, err := f.Seek(prog.Offset, io.SeekStart); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	im := &importer{
		api: api, hc: api.httpClient(60 * time.Second),
		batch: *batch, maxBytes: *maxBytes, retries: *retries,
		autoID: *autoID, idPrefix: "imp-" + hex.EncodeToString(sum[:6]) + "-",
		stderr: env.Stderr, sum: &prog.Summary, retryPause: 200 * time.Millisecond,
	}
	if !*quiet {
		im.bar = newProgressBar(env.Stderr, total, prog.Line)
	}
	start := time.Now()
	elapsedBefore := time.Duration(prog.Summary.Elapsed)
	err = im.run(ctx, f, h, &prog, func() error {
		prog.Summary.Elapsed = jsonSeconds(elapsedBefore + time.Since(start))
		return saveProgress(progPath, prog)
	})
	prog.Summary.Elapsed = jsonSeconds(elapsedBefore + time.Since(start))
	if im.bar != nil {
		im.bar.finish()
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("import interrupted after line %d; run the same command again to resume (%s)", prog.Line, progPath)
		}
		return fmt.Errorf("import stopped after line %d: %w; run the same command again to resume (%s)", prog.Line, err, progPath)
	}
	if err := os.Remove(progPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("import: remove %s: %w", progPath, err)
	}
	s := prog.Summary
	// rejected by the daemon per batch, or here while reading: by line
	slices.SortStableFunc(s.Bad, func(a, b badLine) int { return cmp.Compare(a.Line, b.Line) })
	if api.output == "json" {
		if s.Bad == nil {
			s.Bad = []badLine{}
		}
		err = printJSON(env.Stdout, s)
	} else {
		printSummary(env.Stdout, s)
	}
	if err == nil && s.Rejected > 0 {
		err = &RejectedLinesError{Rejected: s.Rejected, Lines: s.Lines - s.Blank}
	}
	return err
}

// RejectedLinesError ends an import that went through the whole file but
// had lines rejected (listed in the summary): dq exits 2, so that a script
// tells it from an import that stopped (exit 1).
type RejectedLinesError struct{ Rejected, Lines int64 }

func (e *RejectedLinesError) Error() string {
	return fmt.Sprintf("import: %d of %d lines rejected (see the summary); fix them and import the file again", e.Rejected, e.Lines)
}

// ExitCode is dq's exit status for it.
func (e *RejectedLinesError) ExitCode() int { return 2 }

func printSummary(w io.Writer, s importSummary) {
	secs := time.Duration(s.Elapsed).Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(s.Accepted+s.Rejected) / secs
	}
	fmt.Fprintf(w, "imported %s: %d lines, %d accepted (%d created, %d unchanged, %d updated, %d journaled), %d rejected, %d blank; %.1fs, %.0f lines/s\n",
		s.File, s.Lines, s.Accepted, s.Created, s.Unchanged, s.Updated, s.Journaled, s.Rejected, s.Blank, secs, rate)
	for _, b := range s.Bad {
		fmt.Fprintf(w, "  line %d: %s: %s\n", b.Line, b.Code, b.Reason)
	}
	if n := s.Rejected - int64(len(s.Bad)); n > 0 {
		fmt.Fprintf(w, "  ... and %d more rejected lines\n", n)
	}
}

// countLines counts the lines of f (a last line without a newline counts)
// and rewinds it.
func countLines(f *os.File) (int64, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	buf := make([]byte, 256<<10)
	var n int64
	var last byte = '\n'
	for {
		k, err := f.Read(buf)
		if k > 0 {
			n += int64(bytes.Count(buf[:k], []byte{'\n'}))
			last = buf[k-1]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if last != '\n' {
		n++
	}
	_, err := f.Seek(0, io.SeekStart)
	return n, err
}

func loadProgress(path string) (importProgress, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return importProgress{}, false, nil
	}
	if err != nil {
		return importProgress{}, false, fmt.Errorf("import: %w", err)
	}
	var p importProgress
	if err := json.Unmarshal(b, &p); err != nil || p.Version != 1 {
		return importProgress{}, false, fmt.Errorf("import: %s is not a progress file of this dq (%v); remove it or use --restart", path, err) //nolint:errorlint // err is nil on a version mismatch (%w would print %!w(<nil>)) and is detail, not a cause to match
	}
	return p, true, nil
}

// verifyPrefix hashes the first p.Offset bytes of f into h and compares.
func verifyPrefix(f *os.File, p importProgress, h hash.Hash) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	n, err := io.Copy(h, io.LimitReader(f, p.Offset))
	if err != nil {
		return err
	}
	if n != p.Offset {
		return fmt.Errorf("the file is shorter (%d bytes) than the part already imported (%d bytes)", n, p.Offset)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != p.PrefixSHA256 {
		return errors.New("the part already imported has changed")
	}
	return nil
}

// saveProgress writes p atomically (temp file, fsync, rename).
func saveProgress(path string, p importProgress) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("save progress: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("save progress: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("save progress: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("save progress: %w", err)
	}
	return os.Rename(tmp, path)
}

// run reads lines from r (positioned at prog.Offset, h holding the hash of
// everything before), submits them in batches, and after each batch updates
// prog and calls save.
func (im *importer) run(ctx context.Context, r io.Reader, h hash.Hash, prog *importProgress, save func() error) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var (
		pending      []importLine
		pendingBytes int
		offset       = prog.Offset
		line         = prog.Line
	)
	// flush submits the pending lines and records that everything up to
	// offset is done.
	flush := func() error {
		if len(pending) > 0 {
			if err := im.submit(ctx, pending); err != nil {
				return err
			}
		}
		pending, pendingBytes = pending[:0], 0
		prog.Offset, prog.Line = offset, line
		prog.PrefixSHA256 = hex.EncodeToString(h.Sum(nil))
		if im.bar != nil {
			im.bar.update(line, im.sum.Accepted, im.sum.Rejected)
		}
		return save()
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		raw, err := br.ReadBytes('\n')
		if len(raw) > 0 {
			body := bytes.TrimSpace(raw)
			var task []byte
			reason := ""
			if len(body) > 0 {
				task, reason = im.prepare(body, line+1)
			}
			// A full batch goes out before this line is counted, so that
			// the saved offset ends exactly where the batch ends.
			if task != nil && len(pending) > 0 && (len(pending) >= im.batch || pendingBytes+len(task)+1 > im.maxBytes) {
				if err := flush(); err != nil {
					return err
				}
			}
			line++
			offset += int64(len(raw))
			h.Write(raw)
			im.sum.Lines = line
			switch {
			case len(body) == 0:
				im.sum.Blank++
			case reason != "":
				im.reject(line, "invalid_json", reason)
			default:
				pending = append(pending, importLine{line: line, body: task})
				pendingBytes += len(task) + 1
			}
		}
		if err == io.EOF {
			return flush()
		}
		if err != nil {
			return err
		}
	}
}

// prepare checks that body is a JSON object and, with auto-id, gives it an
// id when it has none. It returns the task's JSON or why the line is bad.
func (im *importer) prepare(body []byte, line int64) ([]byte, string) {
	if body[0] != '{' || !json.Valid(body) {
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			return nil, "not valid JSON: " + err.Error()
		}
		return nil, "not a JSON object"
	}
	if !im.autoID {
		return body, ""
	}
	var probe struct {
		ID *string `json:"id"`
	}
	if err := json.Unmarshal(body, &probe); err != nil || probe.ID != nil {
		return body, "" // the daemon reports a bad id field
	}
	id := `{"id":"` + im.idPrefix + strconv.FormatInt(line, 10) + `"`
	rest := bytes.TrimSpace(body[1:])
	if len(rest) > 0 && rest[0] == '}' {
		return append([]byte(id), '}'), ""
	}
	out := make([]byte, 0, len(id)+1+len(body))
	out = append(out, id...)
	out = append(out, ',')
	return append(out, body[1:]...), ""
}

func (im *importer) reject(line int64, code, reason string) {
	im.sum.Rejected++
	if len(im.sum.Bad) < maxKeptBad {
		im.sum.Bad = append(im.sum.Bad, badLine{Line: line, Code: code, Reason: reason})
	}
}

// submit sends lines as one batch request, retrying a batch that failed as
// a whole, and splitting it when the daemon refuses it as a whole (too
// large, or one line spoils the request) so that only bad lines are
// rejected.
func (im *importer) submit(ctx context.Context, lines []importLine) error {
	var body bytes.Buffer
	body.WriteString(`{"tasks":[`)
	for i, l := range lines {
		if i > 0 {
			body.WriteByte(',')
		}
		body.Write(l.body)
	}
	body.WriteString("]}")
	var resp []byte
	var err error
	pause := im.retryPause
	for attempt := 0; ; attempt++ {
		resp, err = rawCall(ctx, im.api, im.hc, http.MethodPost, "/v1/tasks/batch", body.Bytes())
		if err == nil || ctx.Err() != nil {
			break
		}
		var apiErr *client.APIError
		if errors.As(err, &apiErr) && apiErr.Status >= 400 && apiErr.Status < 500 && apiErr.Status != 408 && apiErr.Status != 429 {
			break // refused as a whole: not worth retrying as is
		}
		if attempt >= im.retries {
			return err
		}
		fmt.Fprintf(im.stderr, "\nbatch of lines %d-%d failed (%v); retrying in %v\n", lines[0].line, lines[len(lines)-1].line, err, pause)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return ctx.Err()
		}
		pause = min(2*pause, 10*time.Second)
	}
	if err != nil {
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) {
			return err
		}
		switch apiErr.Status {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusUnsupportedMediaType:
			return err // every batch would fail the same way
		}
		if len(lines) == 1 {
			im.reject(lines[0].line, apiErr.Code, apiErr.Message)
			return nil
		}
		half := len(lines) / 2
		if err := im.submit(ctx, lines[:half]); err != nil {
			return err
		}
		return im.submit(ctx, lines[half:])
	}
	var out struct {
		Results []struct {
			ID      string           `json:"id"`
			State   string           `json:"state"`
			Outcome string           `json:"outcome"`
			Error   *client.APIError `json:"error"`
		} `json:"results"`
	}
	if err := json.Unmarshal(resp, &out); err != nil {
		return fmt.Errorf("batch answer: %w", err)
	}
	if len(out.Results) != len(lines) {
		return fmt.Errorf("batch of %d tasks answered with %d results", len(lines), len(out.Results))
	}
	for i, r := range out.Results {
		if r.Error != nil {
			im.reject(lines[i].line, r.Error.Code, r.Error.Message)
			continue
		}
		im.sum.Accepted++
		switch {
		case r.State == "journaled" || r.Outcome == "journaled":
			im.sum.Journaled++
		case r.Outcome == "unchanged":
			im.sum.Unchanged++
		case r.Outcome == "updated":
			im.sum.Updated++
		default:
			im.sum.Created++
		}
	}
	return nil
}
