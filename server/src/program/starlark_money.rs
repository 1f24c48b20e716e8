//! The `money` type as programs see it: an immutable value with `.amount` (a canonical
//! decimal string) and `.currency`, usable as a type annotation (`price: money`).

use std::fmt;

use allocative::Allocative;
use serde::Serialize;
use starlark::any::ProvidesStaticType;
use starlark::environment::GlobalsBuilder;
use starlark::starlark_module;
use starlark::values::starlark_value;
use starlark::values::{AllocValue, Heap, StarlarkPagable, StarlarkValue, Value, ValueLike};

#[derive(Debug, Clone, ProvidesStaticType, Allocative, StarlarkPagable, Serialize)]
pub struct StarlarkMoney {
    pub amount: String,
    pub currency: String,
}

impl fmt::Display for StarlarkMoney {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "money({:?}, {:?})", self.amount, self.currency)
    }
}

#[starlark_value(type = "money")]
impl<'v> StarlarkValue<'v> for StarlarkMoney {
    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        match attribute {
            "amount" => Some(heap.alloc(self.amount.as_str())),
            "currency" => Some(heap.alloc(self.currency.as_str())),
            _ => None,
        }
    }

    fn dir_attr(&self) -> Vec<String> {
        vec!["amount".to_string(), "currency".to_string()]
    }

    fn equals(&self, other: Value<'v>) -> starlark::Result<bool> {
        Ok(other
            .downcast_ref::<StarlarkMoney>()
            .is_some_and(|o| o.amount == self.amount && o.currency == self.currency))
    }
}

impl<'v> AllocValue<'v> for StarlarkMoney {
    fn alloc_value(self, heap: Heap<'v>) -> Value<'v> {
        heap.alloc_simple(self)
    }
}

#[starlark_module]
#[starlark_types(StarlarkMoney as money)]
pub fn money_globals(globals: &mut GlobalsBuilder) {}
