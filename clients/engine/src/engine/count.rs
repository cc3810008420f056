//! Counting: each rule's outcome in the metrics, and the decision records that go with it.

use super::ctx::{Ctx, Outcomes};
use super::verdict::{LogLevel, LogRecord, SHADOW_ALARM};
use super::Shared;
use crate::metrics::{Event, Outcome};

impl Shared {
    pub(crate) fn count(
        &self,
        ctx: &Ctx,
        index: usize,
        outcome: Outcome,
        log: &mut Vec<LogRecord>,
    ) {
        let Some(k) = ctx.keyed.get(index) else {
            return;
        };
        self.metrics.record(Event::Decision {
            route: ctx.route.name(),
            rule: &k.rule.name,
            outcome,
        });
        let rule = k.rule.name.as_str();
        let (level, message, reason) = match outcome {
            Outcome::Admit if !ctx.sampled => return,
            Outcome::Admit => (LogLevel::Info, "admitted", "admit".to_string()),
            Outcome::Refuse => (LogLevel::Info, "refused", format!("refuse:{rule}")),
            Outcome::RefuseCached => (
                LogLevel::Info,
                "refused from the negative cache",
                format!("refuse_cached:{rule}"),
            ),
            Outcome::UnavailableDeny => (
                LogLevel::Warn,
                "refused: the store cannot answer",
                "unavailable:deny".to_string(),
            ),
            Outcome::OpenAdmit => (
                LogLevel::Warn,
                "admitted without the store",
                "unavailable:open".to_string(),
            ),
            Outcome::FallbackAdmit => (
                LogLevel::Info,
                "admitted by the local fallback",
                "fallback_admit".to_string(),
            ),
            Outcome::FallbackRefuse => (
                LogLevel::Info,
                "refused by the local fallback",
                "fallback_refuse".to_string(),
            ),
            Outcome::ShadowRefuse => (
                LogLevel::Info,
                "a shadow rule would have refused",
                format!("shadow_refuse:{rule}"),
            ),
            Outcome::Error => (
                LogLevel::Warn,
                "the module refused a store call",
                format!("error:{rule}"),
            ),
            Outcome::UnreplicatedAdmit => (
                LogLevel::Warn,
                "admitted, not acknowledged by a replica in time",
                format!("unreplicated:{rule}"),
            ),
            Outcome::Shed | Outcome::Exempt => return,
        };
        log.push(LogRecord::new(
            level,
            message,
            reason,
            ctx.route.name(),
            rule,
            ctx.policy.version,
            outcome.name(),
        ));
    }

    /// Counts the shadow rules' answers, and watches those that declare `expect_refusals`: the
    /// request whose evaluation switches an alarm on logs it.
    pub(super) fn shadows(&self, ctx: &Ctx, answer: &Outcomes, log: &mut Vec<LogRecord>) {
        for i in &answer.shadow_refused {
            self.count(ctx, *i, Outcome::ShadowRefuse, log);
        }
        let evaluated = answer
            .shadow_refused
            .iter()
            .map(|i| (i, true))
            .chain(answer.shadow_admitted.iter().map(|i| (i, false)));
        for (i, refused) in evaluated {
            let Some(k) = ctx.keyed.get(*i) else {
                continue;
            };
            if k.rule.expect_refusals.is_some()
                && self.metrics.shadow_evaluated(&k.rule.name, refused)
            {
                log.push(LogRecord::new(
                    LogLevel::Warn,
                    "a shadow rule refuses more than ten times the share it expects",
                    format!("shadow_alarm:{}", k.rule.name),
                    ctx.route.name(),
                    &k.rule.name,
                    ctx.policy.version,
                    SHADOW_ALARM,
                ));
            }
        }
    }

    pub(super) fn count_all(&self, ctx: &Ctx, outcome: Outcome, log: &mut Vec<LogRecord>) {
        for (i, k) in ctx.keyed.iter().enumerate() {
            if !k.rule.shadow {
                self.count(ctx, i, outcome, log);
            }
        }
    }
}
