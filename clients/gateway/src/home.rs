//! `--region`, `--home`, `--home-cluster` and `--reporter`: the home store this gateway reports
//! to (section 15), connected in the background so that a home down at start delays nothing
//! but the first allocations (the keys start at the floor meanwhile).

use std::sync::Arc;
use std::time::Duration;

use redis_rl_client::gateway::connect::Store;
use redis_rl_client::{Gateway, Rl, RlConnection};
use rl_core::allocate::valid_name;
use rl_gateway::regions::Reporter;
use tokio::sync::watch;

use crate::cli::Serve;

pub struct Home {
    url: String,
    cluster: bool,
    region: String,
    reporter: String,
}

impl Home {
    /// The home store the flags name, checked; `None` without `--home`.
    pub fn of(args: &Serve) -> Result<Option<Home>, String> {
        let (Some(region), Some(url)) = (&args.region, &args.home) else {
            return Ok(None);
        };
        if !valid_name(region.as_bytes()) {
            return Err(format!(
                "--region {region}: must be 1 to 64 bytes of letters, digits, '-', '_', '.' and ':'"
            ));
        }
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(format!(
                "--home {url}: expected redis://HOST:PORT or rediss://HOST:PORT"
            ));
        }
        let reporter = match &args.reporter {
            Some(name) => name.clone(),
            None => default_reporter(args),
        };
        if !valid_name(reporter.as_bytes()) {
            return Err(format!(
                "--reporter {reporter}: must be 1 to 64 bytes of letters, digits, '-', '_', '.' and ':'"
            ));
        }
        Ok(Some(Home {
            url: url.clone(),
            cluster: args.home_cluster,
            region: region.clone(),
            reporter,
        }))
    }

    /// Starts reporting for `gateway` until `stop` turns true.
    pub fn report<C: RlConnection + 'static>(
        self,
        gateway: Arc<Gateway<C>>,
        stop: watch::Receiver<bool>,
    ) {
        tracing::info!(
            region = %self.region,
            reporter = %self.reporter,
            home = %self.url,
            "reporting the global rules' demand to the home store"
        );
        tokio::spawn(async move {
            if self.cluster {
                let Some(conn) = self.cluster_connection(stop.clone()).await else {
                    return;
                };
                self.reporter(conn).run(gateway, stop).await;
            } else {
                let client = match redis::Client::open(self.url.as_str()) {
                    Ok(client) => client,
                    Err(e) => {
                        tracing::error!("--home {}: {e}", self.url);
                        return;
                    }
                };
                let conn = Store::connect(client);
                self.reporter(conn).run(gateway, stop).await;
            }
        });
    }

    fn reporter<H: RlConnection + 'static>(&self, conn: H) -> Reporter<H> {
        Reporter {
            home: Rl::new(conn),
            region: self.region.clone(),
            name: self.reporter.clone(),
        }
    }

    /// A Cluster's connection, tried every second until it is made or the gateway stops.
    async fn cluster_connection(
        &self,
        mut stop: watch::Receiver<bool>,
    ) -> Option<redis::cluster_async::ClusterConnection> {
        let client = match redis::cluster::ClusterClient::new(vec![self.url.as_str()]) {
            Ok(client) => client,
            Err(e) => {
                tracing::error!("--home {}: {e}", self.url);
                return None;
            }
        };
        loop {
            match client.get_async_connection().await {
                Ok(conn) => return Some(conn),
                Err(e) => tracing::warn!("--home {}: {e}; trying again in a second", self.url),
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.wait_for(|s| *s) => return None,
            }
        }
    }
}

/// The host's name and the first port this gateway listens on: stable across restarts, and
/// distinct for two gateways on one host.
fn default_reporter(args: &Serve) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| valid_name(h.as_bytes()))
        .unwrap_or_else(|| "gateway".to_string());
    let port = [args.listen, args.auth, args.admin]
        .into_iter()
        .flatten()
        .map(|a| a.port())
        .next()
        .unwrap_or(0);
    let name = format!("{host}:{port}");
    name.get(..64.min(name.len()))
        .unwrap_or("gateway")
        .to_string()
}
