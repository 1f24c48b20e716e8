//! Stripe's `amount`: money in the unit Stripe counts each currency in, which is ISO 4217's
//! minor unit but for a few currencies (https://docs.stripe.com/currencies). Warden keeps money
//! in ISO 4217's unit; a refund's request and a program reading Stripe's objects convert here.

use crate::base::money::Money;

/// Currencies Stripe's `amount` counts in whole units (its zero-decimal list), in thousandths
/// (its three-decimal list, a multiple of ten), and the one it counts in hundredths though
/// ISO 4217 gives it no minor unit (ISK, whole krónur only); every other in hundredths.
const STRIPE_ZERO_DECIMAL: &[&str] =
    &["BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "UGX", "VND", "VUV", "XAF", "XOF", "XPF"];
const STRIPE_THREE_DECIMAL: &[&str] = &["BHD", "JOD", "KWD", "OMR", "TND"];

/// Stripe's `amount` for `money` (kept in its ISO 4217 minor unit): the same value in the unit
/// Stripe counts that currency in, or why it cannot be sent exactly.
pub fn amount(money: &Money) -> Result<i64, String> {
    let currency = money.currency.as_str();
    let iso = crate::base::money::exponent(currency).ok_or_else(|| format!("`{currency}` is not a currency"))?;
    let stripe = exponent(currency);
    let cannot = |why: &str| format!("a refund of {money} cannot be sent to Stripe exactly: {why}; nothing was sent");
    let amount = match stripe.cmp(&iso) {
        std::cmp::Ordering::Equal => money.minor,
        std::cmp::Ordering::Greater => {
            (money.minor).checked_mul(10i64.pow(stripe - iso)).ok_or_else(|| cannot("the amount is too large"))?
        }
        std::cmp::Ordering::Less => {
            let unit = 10i64.pow(iso - stripe);
            if money.minor % unit != 0 {
                return Err(cannot(&format!("Stripe takes {currency} in whole units")));
            }
            money.minor / unit
        }
    };
    if stripe == 3 && amount % 10 != 0 {
        return Err(cannot(&format!("Stripe takes {currency} in multiples of ten thousandths")));
    }
    Ok(amount)
}

/// The digits after the point Stripe's `amount` counts `currency` in.
fn exponent(currency: &str) -> u32 {
    if STRIPE_ZERO_DECIMAL.contains(&currency) {
        0
    } else if STRIPE_THREE_DECIMAL.contains(&currency) {
        3
    } else {
        2
    }
}

/// The money a Stripe object's `amount` in `currency` is (as a payment intent says what was
/// paid), in ISO 4217's unit: exact, or why not.
pub fn money_of(amount: i64, currency: &str) -> Result<Money, String> {
    let currency = currency.to_ascii_uppercase();
    let iso = crate::base::money::check_currency(&currency)?;
    let stripe = exponent(&currency);
    if amount < 0 {
        return Err(format!("a Stripe amount of {amount} is negative"));
    }
    let minor = match iso.cmp(&stripe) {
        std::cmp::Ordering::Equal => Some(amount),
        std::cmp::Ordering::Greater => amount.checked_mul(10i64.pow(iso - stripe)),
        std::cmp::Ordering::Less => {
            let unit = 10i64.pow(stripe - iso);
            (amount % unit == 0).then_some(amount / unit)
        }
    };
    let minor = minor.filter(|minor| *minor <= crate::base::money::MONEY_MINOR_MAX);
    let minor =
        minor.ok_or_else(|| format!("a Stripe amount of {amount} {currency} is not money Warden holds exactly"))?;
    Ok(Money { minor, currency })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_class_of_currency_converts_both_ways() {
        for (amount, currency, stripe) in
            [("500", "JPY", 500), ("1.25", "BHD", 1250), ("12.50", "EUR", 1250), ("7", "ISK", 700)]
        {
            let money = Money::parse(amount, currency).unwrap();
            assert_eq!(super::amount(&money), Ok(stripe), "{money}");
            assert_eq!(money_of(stripe, &currency.to_ascii_lowercase()), Ok(money));
        }
        assert!(super::amount(&Money::parse("1.255", "BHD").unwrap()).is_err(), "Stripe takes tens of fils");
        assert!(super::amount(&Money::parse("1.50", "MGA").unwrap()).is_err(), "Stripe takes whole ariary");
        assert!(money_of(750, "isk").is_err(), "half a króna is no money");
    }
}
