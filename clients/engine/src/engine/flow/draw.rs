//! After the rules: a request of a capacity route that goes on to the backend takes a slot of
//! its capacity, waits for one up to `queue.max_wait`, or is shed.

use std::time::Duration;

use super::Pending;
use crate::capacity::Admission;
use crate::engine::capacities::Slot;
use crate::engine::Step;
use crate::time::Instant;

/// How often a request waiting for a slot asks again, at most.
const POLL: Duration = Duration::from_millis(2);

impl Pending {
    /// The verdict of the rules, passed through the route's capacity: an answer the gateway
    /// gives itself (a refusal, a posture's 503) draws nothing; an admission takes a slot,
    /// waits (`Step::Wait`, resumed with no answers), or becomes the capacity's 503.
    pub(crate) fn draw(&mut self, step: Step, now: Instant) -> Step {
        let Step::Done(verdict) = step else {
            return step;
        };
        let Some(drawing) = self.drawing.take() else {
            return Step::Done(verdict);
        };
        if verdict.status.is_some() {
            return Step::Done(verdict);
        }
        let waiting = now < drawing.until;
        let admission = if waiting {
            drawing
                .capacity
                .try_admit(drawing.priority, drawing.tenant, now)
        } else {
            drawing
                .capacity
                .admit(drawing.priority, drawing.tenant, now)
        };
        match admission {
            Admission::Admitted(permit) => {
                self.slot = Some(Slot::new(std::sync::Arc::clone(&drawing.capacity), permit));
                Step::Done(verdict)
            }
            Admission::Shed { retry_after } if waiting => {
                let until = now.saturating_add(retry_after.min(POLL)).min(drawing.until);
                self.drawing = Some(drawing);
                self.parked = Some(verdict);
                Step::Wait { until }
            }
            Admission::Shed { retry_after } => {
                let undo = self.undo(true);
                Step::Done(
                    self.shared
                        .capacity_shed(verdict, &drawing, retry_after, undo),
                )
            }
        }
    }

    /// The rules' verdict of a request waiting for a slot, taken back to draw again.
    pub(crate) fn parked(&mut self) -> Option<crate::engine::Verdict> {
        self.parked.take()
    }
}
