//! How rl-gateway stops. `SIGTERM` (or `SIGINT`): the faces stop accepting and the requests in
//! flight finish, within `--drain-timeout`. A request still running then is answered `503`
//! (reason `drain` in its decision record) and what it holds is ended: its semaphore slots
//! released, its reservations settled or kept as the engine's holdings say. The process exits
//! once those calls have been answered, so no slot stays held after a restart.

use std::sync::Arc;
use std::time::Duration;

use redis_rl_client::{Gateway, RlConnection};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::admin::Reload;
use crate::server::Shutdown;

/// How long the calls that end the cut requests' holdings may take before the process exits
/// anyway (each gives up after a second; a request may need a few).
const RELEASES: Duration = Duration::from_secs(5);

/// The two moments of a stop, as the servers see them ([`Shutdown`]).
pub struct Stopping {
    stop: watch::Sender<bool>,
    cut: watch::Sender<bool>,
}

impl Stopping {
    pub fn new() -> (Stopping, Shutdown) {
        let (stop, stopped) = watch::channel(false);
        let (cut, cut_off) = watch::channel(false);
        (
            Stopping { stop, cut },
            Shutdown {
                stop: stopped,
                cut: cut_off,
            },
        )
    }

    /// Waits for the signals: `SIGHUP` reloads; `SIGTERM` or `SIGINT` stops, with the drain
    /// described above, and this returns once every face has ended and what the cut requests
    /// held has been given back (or [`RELEASES`] has passed).
    pub async fn serve_until_stopped<C: RlConnection + 'static>(
        self,
        reload: Reload,
        faces: Vec<JoinHandle<Result<(), String>>>,
        drain: Duration,
        gateway: Option<Arc<Gateway<C>>>,
    ) -> Result<(), String> {
        signals(reload).await?;
        tracing::info!("stopping: no new connections; requests in flight finish");
        let _ = self.stop.send(true);
        let ended = async {
            for face in faces {
                if let Ok(Err(e)) = face.await {
                    tracing::warn!(error = %e, "a face ended with an error");
                }
            }
        };
        tokio::pin!(ended);
        if tokio::time::timeout(drain, &mut ended).await.is_err() {
            tracing::warn!(
                ?drain,
                "requests still running at the end of the drain are answered 503"
            );
            if let Some(gateway) = &gateway {
                gateway.cut();
            }
            let _ = self.cut.send(true);
            ended.await;
        }
        if let Some(gateway) = gateway {
            if tokio::time::timeout(RELEASES, gateway.drain())
                .await
                .is_err()
            {
                tracing::warn!("some releases were not answered before the exit");
            }
        }
        Ok(())
    }
}

/// Returns at `SIGTERM` or `SIGINT`; `SIGHUP` meanwhile reloads.
async fn signals(reload: Reload) -> Result<(), String> {
    let mut hup = signal(SignalKind::hangup()).map_err(|e| e.to_string())?;
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    loop {
        tokio::select! {
            _ = hup.recv() => match reload().await {
                Ok(version) => tracing::info!(version, "policy reloaded"),
                Err((_, message)) => tracing::warn!("policy not reloaded: {message}"),
            },
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
        }
    }
}
