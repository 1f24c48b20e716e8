//! `progress(done, total, message)`: a program tells a client that asked for progress how
//! far it has come. Reports are kept by the broker of the execution (bounded), carried back
//! with its prints, and sent by the driver as `notifications/progress`; nothing is journaled
//! (a resumed run has no client to tell).

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::none::NoneType;

use crate::broker::Broker;

/// The most reports one execution keeps; later ones are dropped.
pub const PROGRESS_REPORTS_MAX: usize = 100;
/// The longest message kept.
pub const PROGRESS_MESSAGE_CHARS_MAX: usize = 512;

#[starlark_module]
pub fn progress_globals(builder: &mut GlobalsBuilder) {
    /// Reports progress to a client that asked for it: `done` of `total` (both whole numbers,
    /// `total` optional), with an optional message. It never fails and never waits.
    fn progress<'v>(
        #[starlark(require = pos)] done: i32,
        #[starlark(require = pos)] total: Option<i32>,
        #[starlark(require = pos)] message: Option<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<NoneType> {
        let broker = eval.extra.and_then(|extra| extra.downcast_ref::<Broker>());
        if let Some(broker) = broker {
            let mut reports = broker.progress.borrow_mut();
            if reports.len() < PROGRESS_REPORTS_MAX {
                let message = message.map(|m| m.chars().take(PROGRESS_MESSAGE_CHARS_MAX).collect());
                reports.push(crate::broker::ProgressReport { done: done.into(), total: total.map(i64::from), message });
            }
        }
        Ok(NoneType)
    }
}
