//! The parsed form of an expression: one value set per field plus the day rules, and the
//! calendar arithmetic that turns them into the matching days of a given month.

/// First and last year the dialect accepts, and the end of the search horizon.
pub(crate) const MIN_YEAR: i32 = 1970;
/// Last year the dialect accepts; searches stop after local date `MAX_YEAR-12-31`.
pub(crate) const MAX_YEAR: i32 = 2199;

/// A set of small values (0-63), one bit each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Bits(pub(crate) u64);

impl Bits {
    /// The set holding every value of `lo..=hi`.
    pub(crate) fn range(lo: u32, hi: u32) -> Bits {
        let mut bits = Bits::default();
        bits.insert_step(lo, hi, 1);
        bits
    }

    /// Adds `lo, lo+step, ...` up to `hi` inclusive (values above 63 are ignored).
    pub(crate) fn insert_step(&mut self, lo: u32, hi: u32, step: u32) {
        let step = step.max(1);
        let mut v = lo;
        while v <= hi && v < 64 {
            self.0 |= 1 << v;
            v = match v.checked_add(step) {
                Some(next) => next,
                None => break,
            };
        }
    }

    pub(crate) fn contains(self, v: u32) -> bool {
        v < 64 && self.0 & (1 << v) != 0
    }

    /// The smallest member `>= v`.
    pub(crate) fn next_from(self, v: u32) -> Option<u32> {
        if v >= 64 {
            return None;
        }
        let rest = self.0 >> v;
        (rest != 0).then(|| v + rest.trailing_zeros())
    }

    /// The members in increasing order.
    pub(crate) fn iter(self) -> impl Iterator<Item = u32> {
        (0..64).filter(move |&v| self.contains(v))
    }

    pub(crate) fn len(self) -> u32 {
        self.0.count_ones()
    }
}

/// A set of years within `MIN_YEAR..=MAX_YEAR` (230 values), one bit each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct YearSet([u64; 4]);

impl YearSet {
    /// Every year of the dialect: the set used when an expression has no year field.
    pub(crate) fn all() -> YearSet {
        let mut set = YearSet::empty();
        set.insert_step(MIN_YEAR as u32, MAX_YEAR as u32, 1);
        set
    }

    pub(crate) fn empty() -> YearSet {
        YearSet([0; 4])
    }

    /// Adds `lo, lo+step, ...` up to `hi` inclusive, clamped to the dialect's years.
    pub(crate) fn insert_step(&mut self, lo: u32, hi: u32, step: u32) {
        let step = step.max(1);
        let hi = hi.min(MAX_YEAR as u32);
        let mut y = lo.max(MIN_YEAR as u32);
        while y <= hi {
            let i = (y - MIN_YEAR as u32) as usize;
            self.0[i / 64] |= 1 << (i % 64);
            y = match y.checked_add(step) {
                Some(next) => next,
                None => break,
            };
        }
    }

    pub(crate) fn contains(&self, year: i32) -> bool {
        if !(MIN_YEAR..=MAX_YEAR).contains(&year) {
            return false;
        }
        let Ok(i) = usize::try_from(year - MIN_YEAR) else {
            return false;
        };
        self.0[i / 64] & (1 << (i % 64)) != 0
    }

    /// The smallest member `>= year`.
    pub(crate) fn next_from(&self, year: i32) -> Option<i32> {
        let start = usize::try_from(year.max(MIN_YEAR) - MIN_YEAR).ok()?;
        let mut word = start / 64;
        if word >= self.0.len() {
            return None;
        }
        let mut bits = self.0[word] & (u64::MAX << (start % 64));
        loop {
            if bits != 0 {
                let i = word * 64 + bits.trailing_zeros() as usize;
                return i32::try_from(i).ok().map(|i| MIN_YEAR + i);
            }
            word += 1;
            bits = *self.0.get(word)?;
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = i32> + '_ {
        (MIN_YEAR..=MAX_YEAR).filter(move |&y| self.contains(y))
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }
}

/// The day-of-month field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DayRule {
    /// Plain days 1-31 (bit `d` set for day `d`).
    Days(Bits),
    /// `L` (`before` = 0) or `L-n`: the month's last day minus `before`, if that is day 1 or later.
    Last { before: u8 },
    /// `LW`: the weekday nearest the month's last day.
    LastWeekday,
    /// `nW`: the weekday nearest day `n` within the same month.
    NearestWeekday(u8),
}

/// The day-of-week field (0 = Sunday .. 6 = Saturday; a parsed 7 is stored as 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WeekdayRule {
    /// Plain weekdays (bit `w` set for weekday `w`).
    Days(Bits),
    /// `dL`: the last weekday `d` of the month.
    Last(u8),
    /// `d#k`: the `k`-th (1-5) weekday `d` of the month.
    Nth { weekday: u8, nth: u8 },
}

/// A parsed expression: what must hold for a local wall time to match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Schedule {
    pub(crate) seconds: Bits,
    pub(crate) minutes: Bits,
    pub(crate) hours: Bits,
    pub(crate) days: DayRule,
    pub(crate) months: Bits,
    pub(crate) weekdays: WeekdayRule,
    pub(crate) years: YearSet,
    /// Day-of-month text starts with `*` or is `?`.
    pub(crate) dom_star: bool,
    /// Day-of-week text starts with `*` or is `?`.
    pub(crate) dow_star: bool,
    /// None of second (if given), minute, hour starts with `*`: DST gaps and folds are handled
    /// the cronie way (see `next`).
    pub(crate) fixed_time: bool,
    /// The expression has a seconds field.
    pub(crate) has_seconds: bool,
    /// The expression has a year field.
    pub(crate) has_year: bool,
}

impl Schedule {
    /// The days of `month` in `year` that satisfy the day rule (bit `d` set for day `d`).
    ///
    /// Vixie cron's rule: when either day field is a star, a day must match both; otherwise it
    /// must match either (`man 5 crontab`: "If both fields are restricted ... the command will be
    /// run when either field matches the current time").
    pub(crate) fn day_mask(&self, year: i32, month: u32) -> u32 {
        let dim = days_in_month(year, month);
        let first = weekday(year, month, 1);
        let dom = self.dom_mask(year, month, dim);
        let dow = self.dow_mask(dim, first);
        let day = if self.dom_star || self.dow_star {
            dom & dow
        } else {
            dom | dow
        };
        day & month_mask(dim)
    }

    fn dom_mask(&self, year: i32, month: u32, dim: u32) -> u32 {
        match self.days {
            // Bits 1..=31 always fit in the low 32 bits.
            DayRule::Days(bits) => u32::try_from(bits.0 & u64::from(u32::MAX)).unwrap_or_default(),
            DayRule::Last { before } => {
                let before = u32::from(before);
                if dim > before { 1 << (dim - before) } else { 0 }
            }
            DayRule::LastWeekday => 1 << nearest_weekday(year, month, dim, dim),
            DayRule::NearestWeekday(n) => {
                let n = u32::from(n);
                if n <= dim {
                    1 << nearest_weekday(year, month, n, dim)
                } else {
                    0
                }
            }
        }
    }

    fn dow_mask(&self, dim: u32, first: u32) -> u32 {
        // First day (1-based) of the month falling on weekday `w`.
        let first_of = |w: u32| (w + 7 - first) % 7 + 1;
        match self.weekdays {
            WeekdayRule::Days(bits) => {
                let mut mask = 0u32;
                for w in bits.iter() {
                    let mut d = first_of(w);
                    while d <= dim {
                        mask |= 1 << d;
                        d += 7;
                    }
                }
                mask
            }
            WeekdayRule::Last(w) => {
                let d = first_of(u32::from(w));
                let last = d + (dim - d) / 7 * 7;
                1 << last
            }
            WeekdayRule::Nth { weekday, nth } => {
                let d = first_of(u32::from(weekday)) + 7 * (u32::from(nth) - 1);
                if d <= dim { 1 << d } else { 0 }
            }
        }
    }

    /// Whether a civil wall time (seconds precision) matches every field and the day rule.
    pub(crate) fn matches(&self, year: i32, month: u32, day: u32, hms: (u32, u32, u32)) -> bool {
        let (hour, minute, second) = hms;
        self.years.contains(year)
            && self.months.contains(month)
            && (1..=31).contains(&day)
            && self.day_mask(year, month) & (1 << day) != 0
            && self.hours.contains(hour)
            && self.minutes.contains(minute)
            && self.seconds.contains(second)
    }
}

/// Bits 1..=dim set.
fn month_mask(dim: u32) -> u32 {
    (u32::MAX >> (31 - dim.min(31))) & !1
}

pub(crate) fn is_leap_year(year: i32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

/// Days in `month` (1-12) of `year`, proleptic Gregorian.
pub(crate) fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Weekday of a date, 0 = Sunday .. 6 = Saturday (Sakamoto's method).
pub(crate) fn weekday(year: i32, month: u32, day: u32) -> u32 {
    const T: [i32; 12] = [0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4];
    let y = if month < 3 { year - 1 } else { year };
    let m = (month.clamp(1, 12) - 1) as usize;
    let day = i32::try_from(day).unwrap_or_default();
    (y + y.div_euclid(4) - y.div_euclid(100) + y.div_euclid(400) + T[m] + day)
        .rem_euclid(7)
        .unsigned_abs()
}

/// The weekday (Mon-Fri) nearest day `n` without leaving the month (Quartz `nW`): a Saturday
/// moves to Friday `n-1` (Monday `n+2` when `n` is the 1st), a Sunday to Monday `n+1` (Friday
/// `n-2` when `n` is the month's last day).
fn nearest_weekday(year: i32, month: u32, n: u32, dim: u32) -> u32 {
    match weekday(year, month, n) {
        6 if n == 1 => 3,
        6 => n - 1,
        0 if n == dim => n - 2,
        0 => n + 1,
        _ => n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weekday_agrees_with_known_dates() {
        assert_eq!(weekday(2026, 1, 1), 4); // Thursday
        assert_eq!(weekday(2024, 2, 29), 4); // Thursday
        assert_eq!(weekday(2000, 3, 1), 3); // Wednesday
        assert_eq!(weekday(1970, 1, 1), 4); // Thursday
        assert_eq!(weekday(2199, 12, 31), 2); // Tuesday
    }

    #[test]
    fn nearest_weekday_stays_in_month() {
        // 2026-08-01 is a Saturday: 1W is Monday the 3rd.
        assert_eq!(nearest_weekday(2026, 8, 1, 31), 3);
        // 2026-05-31 is a Sunday and the last day: Friday the 29th.
        assert_eq!(nearest_weekday(2026, 5, 31, 31), 29);
        // 2026-02-15 is a Sunday: Monday the 16th.
        assert_eq!(nearest_weekday(2026, 2, 15, 28), 16);
    }

    #[test]
    fn year_set_finds_next_member_across_words() {
        let mut set = YearSet::empty();
        set.insert_step(2199, 2199, 1);
        assert_eq!(set.next_from(1970), Some(2199));
        assert_eq!(set.next_from(2199), Some(2199));
        assert_eq!(set.next_from(2200), None);
        assert_eq!(YearSet::all().len(), 230);
    }

    #[test]
    fn bits_next_from_handles_the_top() {
        let bits = Bits::range(0, 59);
        assert_eq!(bits.next_from(59), Some(59));
        assert_eq!(bits.next_from(60), None);
        assert_eq!(bits.next_from(64), None);
    }
}
