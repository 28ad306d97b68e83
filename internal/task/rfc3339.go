package task

// TimeLayout is how delayq writes times (the API, outcome records, etcd
// values): RFC 3339 with milliseconds.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// RFC3339Offset reports whether an RFC 3339 time (that time.Parse
// accepted) ends with a valid offset: "Z" or ±hh:mm with hh <= 23 and
// mm <= 59. time.Parse takes "+24:00" (which no encoder writes back:
// encoding/json refuses it, as the schedules' etcd encoder did) and
// "+01:60"; RFC 3339 takes neither. Every time the API reads (due_at,
// filters, a schedule's start_at and end_at) goes through it.
func RFC3339Offset(s string) bool {
	n := len(s)
	if n > 0 && (s[n-1] == 'Z' || s[n-1] == 'z') {
		return true
	}
	if n < 6 || (s[n-6] != '+' && s[n-6] != '-') || s[n-3] != ':' {
		return false
	}
	digits := func(a, b byte, hi int) bool {
		return a >= '0' && a <= '9' && b >= '0' && b <= '9' && int(a-'0')*10+int(b-'0') <= hi
	}
	return digits(s[n-5], s[n-4], 23) && digits(s[n-2], s[n-1], 59)
}
