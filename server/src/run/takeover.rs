//! Taking over the runs of an instance whose lease ended (issue 28, step 3): every third of a
//! lease, a serving instance on the PostgreSQL store looks for instances whose lease has ended
//! by the database's clock and that still own open runs, takes their runs (`StateDb::take_over`,
//! one transaction that first waits for every write of the ended epoch in flight, so none lands
//! after), and recovers them by the same table as a start (`recovery::recover_taken`). An action
//! the ended instance began and did not finish is in doubt, as after a crash: it is looked up, or
//! waits for a person. The ended instance cannot have sent anything since its lease ended (the
//! action rule, `run::perform`), and whatever it writes now is refused by its fence.

use std::rc::Rc;

use crate::env::PostgresTarget;
use crate::run::recovery;
use crate::run::runs::Runs;
use crate::store::lease::RENEWALS_PER_LEASE;

/// Looks for ended leases every third of a lease while the server serves.
pub fn spawn(runs: &Rc<Runs>, target: PostgresTarget) {
    let runs = Rc::clone(runs);
    let env = runs.env.clone();
    env.spawn.spawn(Box::pin(async move {
        let every = runs.catalog.manifest.server.store_lease_ms / RENEWALS_PER_LEASE;
        while runs.fatal_message().is_none() && !runs.is_draining() {
            runs.env.clock.sleep(every).await;
            take_over_ended(&runs, &target).await;
        }
    }));
}

/// Takes over the runs of every instance whose lease has ended, and recovers them.
pub async fn take_over_ended(runs: &Runs, target: &PostgresTarget) {
    let env = &runs.env;
    let me = crate::store::owners::me(target);
    let ended = match env.state_db.expired(target).await {
        Ok(ended) => ended,
        Err(failure) => {
            env.log(&format!("looking for instances whose lease ended failed; tried again later: {}", failure.message));
            return;
        }
    };
    for (instance, epoch) in ended.into_iter().filter(|(instance, _)| instance != me) {
        if runs.fatal_message().is_some() || runs.is_draining() {
            return;
        }
        let taken = match env.state_db.take_over(target, &instance, epoch).await {
            Ok(Some(taken)) if !taken.is_empty() => taken,
            Ok(_) => continue,
            // The runs may be this instance's now, and it would never know which: it stops, and
            // its slot's next start recovers every run the slot owns.
            Err(failure) if failure.may_have_committed => {
                let why = format!(
                    "taking over the runs of instance `{instance}` may have committed, and which runs were taken is \
                     not known: {}",
                    failure.message
                );
                runs.stop(&crate::run::store::Fatal::storage(why));
                return;
            }
            Err(failure) => {
                env.log(&format!(
                    "taking over the runs of instance `{instance}` (its lease at epoch {epoch} ended) failed; \
                     tried again later: {}",
                    failure.message
                ));
                continue;
            }
        };
        env.log(&format!(
            "took over {} run(s) of instance `{instance}`, whose lease at epoch {epoch} ended: {}",
            taken.len(),
            taken.join(", ")
        ));
        match recovery::recover_taken(runs, taken).await {
            Ok((report, refusals)) => {
                env.log(&format!(
                    "recovered the runs taken over: released {}, resumed {}, settled {} from their journals, cleaned \
                     up {}",
                    report.released.len(),
                    report.resumed.len(),
                    report.settled_from_end.len(),
                    report.cleaned.len()
                ));
                for refusal in refusals {
                    env.log(&format!("a run taken over needs an operator (warden mcp status): {refusal}"));
                }
            }
            Err(fatal) => {
                runs.stop(&fatal);
                return;
            }
        }
    }
}
