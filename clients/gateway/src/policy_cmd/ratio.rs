//! Exact non-negative rationals for the numbers the tables show and the diff compares: a rate
//! such as 1000 per minute is 50/3 per second, and comparing two rates through floating point
//! could call an exact halving a cut (or miss one) by a rounding.
//!
//! Denominators are `NonZeroU128`, so no division here can panic; the numbers a validated rule
//! yields stay far below `u128` (limit < 2^50, a period in µs < 2^49, an hour in µs < 2^32).

use std::cmp::Ordering;
use std::fmt;
use std::num::NonZeroU128;

/// `num / den`, always in lowest terms (so equal values are equal structurally).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ratio {
    num: u128,
    den: NonZeroU128,
}

/// `a * b` of two `u64`: the product always fits in a `u128`.
pub(crate) fn wide(a: u64, b: u64) -> u128 {
    u128::from(a).wrapping_mul(u128::from(b))
}

fn gcd(a: u128, b: NonZeroU128) -> NonZeroU128 {
    let (mut a, mut b) = (a, b);
    // Euclid: `b` stays non-zero, the loop ends when the remainder is zero.
    while let Some(r) = NonZeroU128::new(a % b) {
        a = b.get();
        b = r;
    }
    b
}

impl Ratio {
    /// `num / den`, or `None` when `den` is 0.
    pub fn new(num: u128, den: u128) -> Option<Ratio> {
        let den = NonZeroU128::new(den)?;
        let g = gcd(num, den);
        NonZeroU128::new(den.get() / g).map(|den| Ratio { num: num / g, den })
    }

    pub fn integer(n: u128) -> Ratio {
        Ratio {
            num: n,
            den: NonZeroU128::MIN,
        }
    }

    pub fn numer(&self) -> u128 {
        self.num
    }

    pub fn denom(&self) -> u128 {
        self.den.get()
    }

    /// Whether `self` is less than half of `other`: the test of a cut ("falls by more than
    /// half"; exactly half is not a cut).
    pub fn below_half_of(&self, other: &Ratio) -> bool {
        match self.num.checked_mul(2) {
            Some(twice) => cmp_fractions(twice, self.den, other.num, other.den).is_lt(),
            // Unreachable for a rule's numbers (see the module's note); a value this large is
            // no cut of anything.
            None => false,
        }
    }

    /// `self / other` when both are non-zero and the quotient fits, else `None`.
    pub fn factor(&self, other: &Ratio) -> Option<Ratio> {
        let other_num = NonZeroU128::new(other.num)?;
        // Cross-reduce first, so the products stay small for any pair of real rates.
        let g1 = gcd(self.num, other_num);
        let g2 = gcd(other.den.get(), self.den);
        let num = (self.num / g1).checked_mul(other.den.get() / g2)?;
        let den = (self.den.get() / g2).checked_mul(other_num.get() / g1)?;
        Ratio::new(num, den)
    }
}

/// Compares `a/b` with `c/d` without multiplying (so without overflow), by their continued
/// fractions: equal integer parts leave the remainders, compared reciprocally.
fn cmp_fractions(a: u128, b: NonZeroU128, c: u128, d: NonZeroU128) -> Ordering {
    let (mut a, mut b, mut c, mut d) = (a, b, c, d);
    let mut flipped = false;
    loop {
        let ord = match (
            (a / b).cmp(&(c / d)),
            NonZeroU128::new(a % b),
            NonZeroU128::new(c % d),
        ) {
            (Ordering::Equal, Some(r1), Some(r2)) => {
                // a/b = q + r1/b and c/d = q + r2/d: r1/b < r2/d exactly when b/r1 > d/r2.
                (a, b, c, d) = (b.get(), r1, d.get(), r2);
                flipped = !flipped;
                continue;
            }
            (Ordering::Equal, None, None) => Ordering::Equal,
            (Ordering::Equal, None, Some(_)) => Ordering::Less,
            (Ordering::Equal, Some(_), None) => Ordering::Greater,
            (ord, _, _) => ord,
        };
        return if flipped { ord.reverse() } else { ord };
    }
}

impl Ord for Ratio {
    fn cmp(&self, other: &Ratio) -> Ordering {
        cmp_fractions(self.num, self.den, other.num, other.den)
    }
}

impl PartialOrd for Ratio {
    fn partial_cmp(&self, other: &Ratio) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Significant digits of a value that is not a whole number: `16.67`, `1.667`, `0.002778`.
const SIGNIFICANT: usize = 4;

impl fmt::Display for Ratio {
    /// Whole numbers exactly, with thousands separated (`360,000`, so a factor of 60 shows in
    /// the digit groups); others to four significant digits, prefixed `~` unless exact
    /// (`2.5`, `~16.67`, `~0.002778`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut whole = self.num / self.den;
        let mut rem = self.num % self.den;
        let int_digits = if whole == 0 {
            0
        } else {
            whole.to_string().len()
        };
        // Long division, one decimal digit at a time, until SIGNIFICANT digits are known
        // (the zeros that lead a value below 1 are not significant).
        let mut frac: Vec<u8> = Vec::new();
        let mut significant = int_digits;
        while rem != 0 && significant < SIGNIFICANT {
            let Some(scaled) = rem.checked_mul(10) else {
                break;
            };
            let digit = u8::try_from(scaled / self.den).unwrap_or(9);
            rem = scaled % self.den;
            if significant > 0 || digit > 0 {
                significant = significant.saturating_add(1);
            }
            frac.push(digit);
        }
        let exact = rem == 0;
        // Half up: the rest is at least half a unit of the last digit (2·rem ≥ den; rem < den,
        // so the subtraction is exact).
        if rem != 0 && rem >= self.den.get().saturating_sub(rem) {
            let mut carry = true;
            for d in frac.iter_mut().rev() {
                if *d == 9 {
                    *d = 0;
                } else {
                    *d = d.saturating_add(1);
                    carry = false;
                    break;
                }
            }
            if carry {
                whole = whole.saturating_add(1);
            }
        }
        while frac.last() == Some(&0) {
            frac.pop();
        }
        let mut text = String::new();
        if !exact {
            text.push('~');
        }
        text.push_str(&group(&whole.to_string()));
        if !frac.is_empty() {
            text.push('.');
            text.extend(frac.iter().map(|d| char::from(b'0'.saturating_add(*d))));
        }
        f.pad(&text)
    }
}

/// `1234567` as `1,234,567`.
fn group(digits: &str) -> String {
    let mut out = String::with_capacity(digits.len().saturating_add(digits.len() / 3));
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len().saturating_sub(i)) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(n: u128, d: u128) -> Ratio {
        Ratio::new(n, d).unwrap()
    }

    #[test]
    fn formats_exactly_or_says_so() {
        assert_eq!(r(1000, 60).to_string(), "~16.67");
        assert_eq!(r(100, 60).to_string(), "~1.667");
        assert_eq!(r(10, 3600).to_string(), "~0.002778");
        assert_eq!(r(5, 2).to_string(), "2.5");
        assert_eq!(r(1, 8).to_string(), "0.125");
        assert_eq!(r(1, 3).to_string(), "~0.3333");
        assert_eq!(r(2, 3).to_string(), "~0.6667");
        assert_eq!(r(99_999, 10_000).to_string(), "~10");
        assert_eq!(r(5000, 3).to_string(), "~1,667");
        assert_eq!(r(360_000, 1).to_string(), "360,000");
        assert_eq!(r(0, 7).to_string(), "0");
        assert_eq!(r(1_000_000, 1).to_string(), "1,000,000");
        assert_eq!(r(100, 1).to_string(), "100");
    }

    #[test]
    fn compares_without_overflow() {
        let big = u128::MAX - 1;
        assert!(r(big, big - 1) < r(big - 1, big - 2));
        assert!(r(1, 3) < r(1, 2));
        assert_eq!(r(2, 4), r(1, 2));
        assert!(r(1, 4).below_half_of(&r(1, 1)));
        assert!(!r(1, 2).below_half_of(&r(1, 1)));
        assert_eq!(r(6000, 1).factor(&r(100, 1)), Some(r(60, 1)));
        assert_eq!(r(1, 1).factor(&Ratio::integer(0)), None);
    }
}
