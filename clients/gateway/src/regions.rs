//! One limit across regions (`clients/CONTRACT.md` section 15): this gateway's reports to the
//! home store.
//!
//! Each gateway reports for itself (a reporter is a gateway, named by `--reporter`): every
//! `every`, each global key it was asked about since its last report goes to the home store as
//! `RL.ALLOCATE` with its demand and what it enforces, and the answer, its region's
//! allocation, is what the key is decided by until the next. The home sums a region's
//! reporters, so no election is needed and a gateway that stops simply ages out; the price is
//! one home call per gateway and active key every `every`. Requests never wait for any of it:
//! they are decided on the regional store by the last allocation answered.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use redis_rl_client::gateway::now;
use redis_rl_client::Allotment;
use redis_rl_client::{Gateway, Rl, RlConnection};
use rl_engine::AllocationReport;
use tokio::sync::watch;

/// How often the engine is asked for the reports due: well under the shortest `every`.
const TICK: Duration = Duration::from_millis(25);
/// Reports in flight at once to the home store.
const IN_FLIGHT: usize = 64;

/// Who reports, and to which home.
pub struct Reporter<H> {
    pub home: Rl<H>,
    pub region: String,
    pub name: String,
}

impl<H: RlConnection + 'static> Reporter<H> {
    /// Reports for `gateway` until `stop` turns true.
    pub async fn run<C: RlConnection + 'static>(
        self,
        gateway: Arc<Gateway<C>>,
        mut stop: watch::Receiver<bool>,
    ) {
        let this = Arc::new(self);
        let mut failing = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            let engine = gateway.engine();
            let reports = engine.allocation_reports(now());
            if reports.is_empty() {
                continue;
            }
            let answers: Vec<(AllocationReport, Result<Allotment, String>)> = stream::iter(reports)
                .map(|report| {
                    let this = Arc::clone(&this);
                    async move {
                        let answer = this.send(&report).await;
                        (report, answer)
                    }
                })
                .buffer_unordered(IN_FLIGHT)
                .collect()
                .await;
            for (report, answer) in &answers {
                engine.allocated(report, answer.as_ref().ok().copied());
            }
            // One line when the home stops answering and one when it answers again, not one
            // per report: the lease age on /metrics is what an operator alarms on.
            let failed = answers
                .iter()
                .find_map(|(r, a)| a.as_ref().err().map(|e| (r, e)));
            match (failed, failing) {
                (Some((report, error)), false) => {
                    tracing::warn!(
                        rule = %report.rule,
                        key = %report.key,
                        "the home store did not answer a report ({error}): each key keeps its allocation until its lease ends"
                    );
                    failing = true;
                }
                (None, true) => {
                    tracing::info!("the home store answers reports again");
                    failing = false;
                }
                _ => {}
            }
        }
    }

    /// One report: the allocation answered, within a fifth of the lease (one `every` by
    /// default). A late answer would still be safe (its lease counts from the sending), but a
    /// report stuck on a dead connection must not hold the next one back.
    async fn send(&self, report: &AllocationReport) -> Result<Allotment, String> {
        let wait = Duration::from_millis((report.terms.lease_ms / 5).max(100));
        let call = self.home.allocate(
            report.key.as_bytes(),
            &report.terms,
            &self.region,
            &self.name,
            report.demand,
            report.held,
        );
        match tokio::time::timeout(wait, call).await {
            Ok(Ok(allotment)) => Ok(allotment),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {wait:?}")),
        }
    }
}
