//! Times as people read them: no clock is read here (the seam's `Clock` gives the times).

/// `ms` since the epoch as RFC 3339 UTC with milliseconds (2026-12-03T08:35:12.345Z): the
/// civil date from the day count (Howard Hinnant's `civil_from_days`), without a time crate.
pub fn utc_timestamp(ms: u64) -> String {
    let (days, ms_of_day) = ((ms / 86_400_000) as i64, ms % 86_400_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    let (hours, minutes, seconds, millis) =
        (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60, ms_of_day / 1000 % 60, ms_of_day % 1000);
    format!("{year:04}-{month:02}-{day:02}T{hours:02}:{minutes:02}:{seconds:02}.{millis:03}Z")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_timestamp_is_rfc_3339_utc() {
        assert_eq!(super::utc_timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::utc_timestamp(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(super::utc_timestamp(1_796_286_912_345), "2026-12-03T08:35:12.345Z");
    }
}
