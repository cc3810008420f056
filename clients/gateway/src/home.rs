//! `--region`, `--home`, `--home-cluster`, `--home-sentinel` and `--reporter`: the home store this gateway reports
//! to (section 15), connected in the background so that a home down at start delays nothing
//! but the first allocations (the keys start at the floor meanwhile).

use std::sync::Arc;
use std::time::Duration;

use redis::IntoConnectionInfo;
use redis_rl_client::gateway::connect::Store;
use redis_rl_client::{Gateway, Rl, RlConnection};
use rl_core::allocate::valid_name;
use rl_gateway::regions::Reporter;
use tokio::sync::watch;

use crate::cli::Serve;
use crate::sentinel::SentinelPrimary;

pub struct Home {
    urls: Vec<String>,
    kind: Kind,
    region: String,
    reporter: String,
}

/// What --home names.
enum Kind {
    /// One server.
    Server,
    /// A Redis Cluster's nodes (--home-cluster).
    Cluster,
    /// Sentinels, and the name they know the primary by (--home-sentinel).
    Sentinel(String),
}

impl Home {
    /// The home store the flags name, checked; `None` without `--home`.
    pub fn of(args: &Serve) -> Result<Option<Home>, String> {
        let Some(region) = &args.region else {
            return Ok(None);
        };
        if args.home.is_empty() {
            return Ok(None);
        }
        if !valid_name(region.as_bytes()) {
            return Err(format!(
                "--region {region}: must be 1 to 64 bytes of letters, digits, '-', '_', '.' and ':'"
            ));
        }
        for url in &args.home {
            let scheme = url.starts_with("redis://") || url.starts_with("rediss://");
            if !scheme || url.as_str().into_connection_info().is_err() {
                return Err(format!(
                    "--home {url}: expected redis://HOST:PORT or rediss://HOST:PORT"
                ));
            }
        }
        let kind = match (&args.home_sentinel, args.home_cluster) {
            (Some(name), _) if name.is_empty() => {
                return Err("--home-sentinel: the primary's name is empty".to_string())
            }
            (Some(name), _) => Kind::Sentinel(name.clone()),
            (None, true) => Kind::Cluster,
            (None, false) if args.home.len() > 1 => {
                return Err(format!(
                    "--home names {} servers: the home store is one server, or a Cluster's nodes \
                     with --home-cluster, or Sentinels with --home-sentinel NAME",
                    args.home.len()
                ))
            }
            (None, false) => Kind::Server,
        };
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
            urls: args.home.clone(),
            kind,
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
        let home = self.urls.join(",");
        tracing::info!(
            region = %self.region,
            reporter = %self.reporter,
            home = %home,
            "reporting the global rules' demand to the home store"
        );
        tokio::spawn(async move {
            match &self.kind {
                Kind::Cluster => {
                    if let Some(conn) = self.cluster_connection(stop.clone()).await {
                        self.reporter(conn).run(gateway, stop).await;
                    }
                }
                Kind::Sentinel(name) => match SentinelPrimary::new(&self.urls, name) {
                    Ok(conn) => self.reporter(conn).run(gateway, stop).await,
                    Err(e) => tracing::error!("--home {home}: {e}"),
                },
                Kind::Server => match redis::Client::open(home.as_str()) {
                    Ok(client) => {
                        self.reporter(Store::connect(client))
                            .run(gateway, stop)
                            .await
                    }
                    Err(e) => tracing::error!("--home {home}: {e}"),
                },
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
        let home = self.urls.join(",");
        let client = match redis::cluster::ClusterClient::new(self.urls.clone()) {
            Ok(client) => client,
            Err(e) => {
                tracing::error!("--home {home}: {e}");
                return None;
            }
        };
        loop {
            match client.get_async_connection().await {
                Ok(conn) => return Some(conn),
                Err(e) => tracing::warn!("--home {home}: {e}; trying again in a second"),
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
