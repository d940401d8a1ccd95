//! Unit tests of [`super`].

use super::when;

#[test]
fn times_read_as_utc_dates() {
    assert_eq!(when(0, 0), "1970-01-01 00:00:00 UTC (in 0 s)");
    assert_eq!(when(1_798_376_700, 1_798_376_400), "2026-12-27 13:05:00 UTC (in 300 s)");
    assert_eq!(when(951_782_400, 951_782_410), "2000-02-29 00:00:00 UTC (10 s ago)");
}
