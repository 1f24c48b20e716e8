//! Exact money: a decimal amount in minor units and an ISO 4217-style currency code.
//! Never floating point. `"35"`, `"35.0"` and `"35.00"` are the same amount.

use std::fmt;

/// Digits after the decimal point that an amount may carry (and is written with).
pub const MONEY_SCALE: u32 = 2;
/// The largest amount held exactly, in minor units (10^15 minor units = 10^13 whole units).
/// Larger amounts are refused by the input check (the schema cannot say so: seed 000 section 4).
pub const MONEY_MINOR_MAX: i64 = 1_000_000_000_000_000;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Money {
    /// The amount in minor units (cents for USD). Never negative.
    pub minor: i64,
    pub currency: String,
}

impl Money {
    pub fn parse(amount: &str, currency: &str) -> Result<Money, String> {
        let minor = parse_amount(amount)?;
        check_currency(currency)?;
        Ok(Money { minor, currency: currency.to_string() })
    }

    /// The amount as written by Warden: whole units, a point, `MONEY_SCALE` digits.
    pub fn amount_text(&self) -> String {
        let scale = 10i64.pow(MONEY_SCALE);
        format!("{}.{:0width$}", self.minor / scale, self.minor % scale, width = MONEY_SCALE as usize)
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"amount": self.amount_text(), "currency": self.currency})
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.amount_text(), self.currency)
    }
}

/// A non-negative decimal with at most `MONEY_SCALE` fraction digits, in minor units.
pub fn parse_amount(text: &str) -> Result<i64, String> {
    let (whole, fraction) = match text.split_once('.') {
        Some((whole, fraction)) => (whole, fraction),
        None => (text, ""),
    };
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits_only(whole) || !digits_only(fraction) || (text.contains('.') && fraction.is_empty())
    {
        return Err(format!("`{text}` is not a decimal amount such as \"35.00\""));
    }
    if fraction.len() > MONEY_SCALE as usize {
        return Err(format!("`{text}` has more than {MONEY_SCALE} digits after the decimal point"));
    }
    let whole_digits = whole.trim_start_matches('0');
    if whole_digits.len() > 13 {
        return Err(format!("`{text}` is too large to hold exactly"));
    }
    let whole_value: i64 = if whole_digits.is_empty() {
        0
    } else {
        whole_digits.parse().map_err(|_| format!("`{text}` is too large to hold exactly"))?
    };
    let mut fraction_value: i64 = if fraction.is_empty() { 0 } else { fraction.parse().expect("digits") };
    for _ in fraction.len()..MONEY_SCALE as usize {
        fraction_value *= 10;
    }
    let minor = whole_value
        .checked_mul(10i64.pow(MONEY_SCALE))
        .and_then(|v| v.checked_add(fraction_value))
        .filter(|&v| v <= MONEY_MINOR_MAX)
        .ok_or_else(|| format!("`{text}` is too large to hold exactly"))?;
    Ok(minor)
}

pub fn check_currency(currency: &str) -> Result<(), String> {
    if currency.len() == 3 && currency.bytes().all(|b| b.is_ascii_uppercase()) {
        Ok(())
    } else {
        Err(format!("`{currency}` is not a currency code such as \"USD\""))
    }
}

/// The JSON Schema pattern equivalent to `parse_amount` (except the size limit).
pub const AMOUNT_PATTERN: &str = "^[0-9]+(\\.[0-9]{1,2})?$";
pub const CURRENCY_PATTERN: &str = "^[A-Z]{3}$";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_amounts_normalise_equally() {
        let a = Money::parse("35", "USD").unwrap();
        let b = Money::parse("35.00", "USD").unwrap();
        let c = Money::parse("035.0", "USD").unwrap();
        assert_eq!(a, b);
        assert_eq!(b, c);
        assert_eq!(a.amount_text(), "35.00");
        assert_eq!(Money::parse("0.5", "EUR").unwrap().amount_text(), "0.50");
    }

    #[test]
    fn refuses_what_is_not_exact() {
        for bad in ["", ".5", "5.", "-1", "1e3", "1.234", "1,00", " 1", "99999999999999"] {
            assert!(parse_amount(bad).is_err(), "{bad:?} accepted");
        }
        assert!(check_currency("usd").is_err());
        assert!(check_currency("USDX").is_err());
    }
}
