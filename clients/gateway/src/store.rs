//! The store a gateway decides against: Redis (one server or a cluster), or `memory://`, the
//! engine's in-memory store in this process: the module's arithmetic without Redis, for one
//! node, tests and demos. Every face takes the same client (`Rl<C>`) whichever it is.

use std::sync::{Arc, Mutex};

use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};
use redis_rl_client::RlConnection;
use rl_engine::memory::MemoryStore;
use rl_engine::wire::Reply;

/// Where `--store` points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    Redis(String),
    Memory,
}

impl StoreUrl {
    pub fn parse(url: &str) -> Result<StoreUrl, String> {
        if url == "memory://" {
            return Ok(StoreUrl::Memory);
        }
        if url.starts_with("redis://") || url.starts_with("rediss://") || url.starts_with("unix://")
        {
            return Ok(StoreUrl::Redis(url.to_string()));
        }
        Err(format!(
            "--store {url}: expected redis://HOST:PORT, rediss://HOST:PORT or memory://"
        ))
    }
}

/// The engine's in-memory store as a connection. Cloning shares the store.
#[derive(Clone, Default)]
pub struct MemoryConnection {
    store: Arc<Mutex<MemoryStore>>,
}

impl MemoryConnection {
    fn answer(&self, cmd: &Cmd) -> Result<Value, RedisError> {
        let args: Vec<Vec<u8>> = cmd
            .args_iter()
            .filter_map(|a| match a {
                Arg::Simple(bytes) => Some(bytes.to_vec()),
                Arg::Cursor => None,
            })
            .collect();
        // The client asks once whether the module is loaded (`COMMAND INFO RL.ADMIT`): here
        // its commands are always there.
        if args
            .first()
            .is_some_and(|name| name.eq_ignore_ascii_case(b"COMMAND"))
        {
            return Ok(Value::Array(vec![Value::Array(vec![Value::BulkString(
                b"rl.admit".to_vec(),
            )])]));
        }
        let now = redis_rl_client::gateway::now().as_micros();
        let reply = self
            .store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .call(&args, now);
        value_of(reply)
    }
}

/// The store's reply as the `redis` crate gives it; an error reply as the server's `Err`.
fn value_of(reply: Reply) -> Result<Value, RedisError> {
    Ok(match reply {
        Reply::Nil => Value::Nil,
        Reply::Int(n) => Value::Int(n),
        Reply::Bulk(b) => Value::BulkString(b),
        Reply::Status(s) if s == "OK" => Value::Okay,
        Reply::Status(s) => Value::SimpleString(s),
        Reply::Array(items) => {
            Value::Array(items.into_iter().map(value_of).collect::<Result<_, _>>()?)
        }
        Reply::Map(pairs) => Value::Map(
            pairs
                .into_iter()
                .map(|(k, v)| Ok((value_of(k)?, value_of(v)?)))
                .collect::<Result<_, RedisError>>()?,
        ),
        Reply::Error(text) => {
            // `ERR detail`, as the module's refusals read through a real connection.
            let detail = text.strip_prefix("ERR ").unwrap_or(&text).to_string();
            return Err(RedisError::from((
                ErrorKind::ResponseError,
                "An error was signalled by the server",
                detail,
            )));
        }
    })
}

impl ConnectionLike for MemoryConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let reply = self.answer(cmd);
        Box::pin(async move { reply })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        _pipeline: &'a Pipeline,
        _offset: usize,
        _count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        // The gateway sends one command at a time; nothing here pipelines.
        Box::pin(async {
            Err(RedisError::from((
                ErrorKind::ClientError,
                "the in-memory store takes no pipeline",
            )))
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

impl RlConnection for MemoryConnection {}

#[cfg(test)]
mod tests {
    use super::*;
    use redis_rl_client::{Admit, Rl};

    #[tokio::test]
    async fn the_memory_store_answers_as_the_module() {
        let rl = Rl::new(MemoryConnection::default());
        let ask = || Admit::new(b"k".as_slice(), 2, std::time::Duration::from_secs(60));
        let first = rl.admit(&ask()).await.unwrap();
        let second = rl.admit(&ask()).await.unwrap();
        let third = rl.admit(&ask()).await.unwrap();
        assert!(first.allowed && second.allowed && !third.allowed);
        assert_eq!(third.remaining, 0);
    }

    #[tokio::test]
    async fn an_error_reply_is_the_servers_refusal() {
        let mut conn = MemoryConnection::default();
        let err = redis::cmd("RL.ADMIT")
            .query_async::<Value>(&mut conn)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("ERR"));
        assert!(err.detail().unwrap().contains("wrong number of arguments"));
    }

    #[test]
    fn store_urls() {
        assert_eq!(StoreUrl::parse("memory://"), Ok(StoreUrl::Memory));
        assert_eq!(
            StoreUrl::parse("redis://127.0.0.1:6379"),
            Ok(StoreUrl::Redis("redis://127.0.0.1:6379".into()))
        );
        assert!(StoreUrl::parse("http://x")
            .unwrap_err()
            .contains("expected"));
    }
}
