//! Exact money: a decimal amount in its currency's minor units (ISO 4217: a cent of USD, a
//! whole yen, a thousandth of a Bahraini dinar) and the currency's code. Never floating
//! point. `"35"`, `"35.0"` and `"35.00"` are the same amount.

use std::fmt;

/// The most digits after the decimal point any currency has (CLF, UYW).
pub const MONEY_SCALE_MAX: u32 = 4;
/// The largest amount held exactly, in minor units (10^15 minor units = 10^13 dollars, 10^15
/// yen). Larger amounts are refused by the input check (the schema cannot say so: seed 000
/// section 4).
pub const MONEY_MINOR_MAX: i64 = 1_000_000_000_000_000;

/// ISO 4217 currencies whose minor unit is not a hundredth, by the digits after the point.
const EXPONENT_0: &[&str] = &[
    "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI", "VND", "VUV", "XAF", "XOF",
    "XPF",
];
const EXPONENT_3: &[&str] = &["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"];
const EXPONENT_4: &[&str] = &["CLF", "UYW"];
/// The ISO 4217 currencies of two digits after the point (funds and precious metals, which
/// have no minor unit, are not money here).
const EXPONENT_2: &[&str] = &[
    "AED", "AFN", "ALL", "AMD", "ANG", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT", "BGN", "BMD", "BND",
    "BOB", "BOV", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD", "CDF", "CHE", "CHF", "CHW", "CNY", "COP", "COU",
    "CRC", "CUC", "CUP", "CVE", "CZK", "DKK", "DOP", "DZD", "EGP", "ERN", "ETB", "EUR", "FJD", "FKP", "GBP", "GEL",
    "GHS", "GIP", "GMD", "GTQ", "GYD", "HKD", "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IRR", "JMD", "KES", "KGS",
    "KHR", "KPW", "KYD", "KZT", "LAK", "LBP", "LKR", "LRD", "LSL", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP",
    "MRU", "MUR", "MVR", "MWK", "MXN", "MXV", "MYR", "MZN", "NAD", "NGN", "NIO", "NOK", "NPR", "NZD", "PAB", "PEN",
    "PGK", "PHP", "PKR", "PLN", "QAR", "RON", "RSD", "RUB", "SAR", "SBD", "SCR", "SDG", "SEK", "SGD", "SHP", "SLE",
    "SLL", "SOS", "SRD", "SSP", "STN", "SVC", "SYP", "SZL", "THB", "TJS", "TMT", "TOP", "TRY", "TTD", "TWD", "TZS",
    "UAH", "USD", "USN", "UYU", "UZS", "VED", "VES", "WST", "XCD", "XCG", "YER", "ZAR", "ZMW", "ZWG", "ZWL",
];

/// Digits after the point of `currency`'s minor unit (ISO 4217), or `None` for a code
/// Warden does not know as a currency.
pub fn exponent(currency: &str) -> Option<u32> {
    let tables: [(&[&str], u32); 4] = [(EXPONENT_2, 2), (EXPONENT_0, 0), (EXPONENT_3, 3), (EXPONENT_4, 4)];
    tables.iter().find(|(codes, _)| codes.contains(&currency)).map(|(_, exponent)| *exponent)
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Money {
    /// The amount in the currency's minor units (cents for USD, yen for JPY). Never negative.
    pub minor: i64,
    pub currency: String,
}

impl Money {
    pub fn parse(amount: &str, currency: &str) -> Result<Money, String> {
        let exponent = check_currency(currency)?;
        let minor = parse_amount(amount, currency, exponent)?;
        Ok(Money { minor, currency: currency.to_string() })
    }

    /// Money as a record holds it, an older Warden's too: those wrote every currency with two
    /// digits and took any three capital letters as one. A currency Warden does not know is
    /// read with two digits; digits past a currency's own are rounded up to its next unit (a
    /// quota never counts less than was charged).
    pub fn parse_recorded(amount: &str, currency: &str) -> Result<Money, String> {
        if let Ok(money) = Money::parse(amount, currency) {
            return Ok(money);
        }
        if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!("`{currency}` is not a currency code such as \"USD\""));
        }
        let exponent = exponent(currency).unwrap_or(2);
        let finest = parse_amount(amount, currency, MONEY_SCALE_MAX)?;
        let unit = 10i64.pow(MONEY_SCALE_MAX - exponent);
        let minor = finest / unit + i64::from(finest % unit != 0);
        Ok(Money { minor, currency: currency.to_string() })
    }

    /// The amount as written by Warden: whole units, and for a currency with a minor unit a
    /// point and its digits ("35.00" USD, "500" JPY, "1.250" BHD).
    pub fn amount_text(&self) -> String {
        let exponent = exponent(&self.currency).unwrap_or(2);
        if exponent == 0 {
            return self.minor.to_string();
        }
        let scale = 10i64.pow(exponent);
        format!("{}.{:0width$}", self.minor / scale, self.minor % scale, width = exponent as usize)
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

/// A non-negative decimal in `currency`'s minor units (`exponent` digits after the point;
/// further digits only if they are zeros, as "500.00" yen is 500 yen).
pub fn parse_amount(text: &str, currency: &str, exponent: u32) -> Result<i64, String> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits_only(whole) || !digits_only(fraction) || (text.contains('.') && fraction.is_empty())
    {
        return Err(format!("`{text}` is not a decimal amount such as \"35.00\""));
    }
    let (kept, beyond) = fraction.split_at(fraction.len().min(exponent as usize));
    if !beyond.bytes().all(|b| b == b'0') || fraction.len() > MONEY_SCALE_MAX as usize {
        return Err(match exponent {
            0 => format!("`{text}` has a fraction, and {currency} has no minor unit (whole amounts only)"),
            _ => format!("`{text}` has more than {exponent} digits after the decimal point, as {currency} has"),
        });
    }
    let too_large = || format!("`{text}` is too large to hold exactly");
    let whole_digits = whole.trim_start_matches('0');
    if whole_digits.len() > 16 {
        return Err(too_large());
    }
    let whole_value: i64 = if whole_digits.is_empty() { 0 } else { whole_digits.parse().map_err(|_| too_large())? };
    let mut fraction_value: i64 = if kept.is_empty() { 0 } else { kept.parse().expect("digits") };
    for _ in kept.len()..exponent as usize {
        fraction_value *= 10;
    }
    (whole_value.checked_mul(10i64.pow(exponent)))
        .and_then(|v| v.checked_add(fraction_value))
        .filter(|&v| v <= MONEY_MINOR_MAX)
        .ok_or_else(too_large)
}

/// A currency Warden keeps: an ISO 4217 code it knows, with its minor unit's digits.
pub fn check_currency(currency: &str) -> Result<u32, String> {
    if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(format!("`{currency}` is not a currency code such as \"USD\""));
    }
    exponent(currency).ok_or_else(|| {
        format!("`{currency}` is not an ISO 4217 currency Warden knows (its minor unit decides every amount)")
    })
}

/// The JSON Schema pattern of an amount (the digits a currency allows are the check's).
pub const AMOUNT_PATTERN: &str = "^[0-9]+(\\.[0-9]{1,4})?$";
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
    fn each_currency_is_kept_in_its_own_minor_unit() {
        let yen = Money::parse("500", "JPY").unwrap();
        assert_eq!((yen.minor, yen.amount_text()), (500, "500".to_string()));
        assert_eq!(Money::parse("500.00", "JPY").unwrap(), yen, "zeros past the unit change nothing");
        assert!(Money::parse("500.5", "JPY").unwrap_err().contains("no minor unit"));
        let dinar = Money::parse("1.25", "BHD").unwrap();
        assert_eq!((dinar.minor, dinar.amount_text()), (1250, "1.250".to_string()));
        assert!(Money::parse("1.2345", "KWD").is_err());
        assert_eq!(Money::parse("0.0001", "CLF").unwrap().minor, 1);
        assert_eq!(Money::parse("12.34", "USD").unwrap().minor, 1234);
    }

    #[test]
    fn an_older_record_is_read_rounded_up_to_the_currencys_unit() {
        assert_eq!(Money::parse_recorded("500.00", "JPY").unwrap().minor, 500);
        assert_eq!(Money::parse_recorded("12.50", "JPY").unwrap().minor, 13);
        let unknown = Money::parse_recorded("1.25", "XTS").unwrap();
        assert_eq!((unknown.minor, unknown.amount_text()), (125, "1.25".to_string()));
        assert!(Money::parse_recorded("1.25", "usd").is_err());
    }

    #[test]
    fn refuses_what_is_not_exact() {
        for bad in ["", ".5", "5.", "-1", "1e3", "1.234", "1,00", " 1", "99999999999999"] {
            assert!(parse_amount(bad, "USD", 2).is_err(), "{bad:?} accepted");
        }
        assert!(check_currency("usd").is_err());
        assert!(check_currency("USDX").is_err());
        assert!(check_currency("XYZ").unwrap_err().contains("ISO 4217"));
        assert!(check_currency("XAU").is_err(), "a metal has no minor unit");
    }
}
