package envelope

import "time"

// Timestamps on the wire are exactly YYYY-MM-DDTHH:MM:SS.mmmZ, years
// 0000–9999. Any other spelling is refused rather than normalised, because
// normalising would change the bytes a writer produced.

// ParseTimestamp parses the one accepted spelling.
func ParseTimestamp(s string) (time.Time, bool) {
	if len(s) != 24 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' ||
		s[16] != ':' || s[19] != '.' || s[23] != 'Z' {
		return time.Time{}, false
	}
	num := func(from, to int) (int, bool) {
		n := 0
		for i := from; i < to; i++ {
			if s[i] < '0' || s[i] > '9' {
				return 0, false
			}
			n = n*10 + int(s[i]-'0')
		}
		return n, true
	}
	year, ok1 := num(0, 4)
	month, ok2 := num(5, 7)
	day, ok3 := num(8, 10)
	hour, ok4 := num(11, 13)
	minute, ok5 := num(14, 16)
	second, ok6 := num(17, 19)
	milli, ok7 := num(20, 23)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) {
		return time.Time{}, false
	}
	if month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month) ||
		hour > 23 || minute > 59 || second > 59 {
		return time.Time{}, false
	}
	return time.Date(year, time.Month(month), day, hour, minute, second, milli*1e6, time.UTC), true
}

func daysInMonth(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	default:
		return 31
	}
}

// timestampInRange reports whether t can be written (years 0000–9999).
func timestampInRange(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 0 && y <= 9999
}

// FormatTimestamp writes t in the wire spelling, in UTC, truncated to the
// millisecond. t must lie in years 0000–9999 (Encode checks).
func FormatTimestamp(t time.Time) string {
	return string(appendTimestamp(nil, t))
}

func appendTimestamp(out []byte, t time.Time) []byte {
	t = t.UTC()
	buf := []byte("0000-00-00T00:00:00.000Z")
	put := func(at, width, v int) {
		for i := at + width - 1; i >= at; i-- {
			buf[i] = byte('0' + v%10)
			v /= 10
		}
	}
	put(0, 4, t.Year())
	put(5, 2, int(t.Month()))
	put(8, 2, t.Day())
	put(11, 2, t.Hour())
	put(14, 2, t.Minute())
	put(17, 2, t.Second())
	put(20, 3, t.Nanosecond()/1e6)
	return append(out, buf...)
}
