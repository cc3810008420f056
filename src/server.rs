//! Which server the module runs in: Redis and Valkey differ in what they support, and the
//! module enables some things only where they were verified.

use std::ffi::CStr;

use redis_module::raw;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Flavor {
    Redis,
    Valkey,
}

/// The server's flavour and major.minor version; `None` when it cannot be told (a fork that
/// names itself otherwise, a Valkey without `valkey_version`, a missing API).
pub fn version(ctx: *mut raw::RedisModuleCtx) -> Option<(Flavor, u32, u32)> {
    // SAFETY: `ctx` is a context Redis handed to a callback; the info data is freed before returning and its strings are
    // read before that.
    let (name, valkey) = unsafe {
        let (Some(get), Some(field), Some(free)) = (
            raw::RedisModule_GetServerInfo,
            raw::RedisModule_ServerInfoGetFieldC,
            raw::RedisModule_FreeServerInfo,
        ) else {
            return None;
        };
        let info = get(ctx, c"server".as_ptr());
        if info.is_null() {
            return None;
        }
        let text = |name: &CStr| {
            let v = field(info, name.as_ptr());
            (!v.is_null()).then(|| CStr::from_ptr(v).to_string_lossy().into_owned())
        };
        let name = text(c"server_name");
        let valkey = text(c"valkey_version");
        free(ctx, info);
        (name, valkey)
    };
    // Redis 7.0 prints no `server_name`.
    match (name.as_deref().unwrap_or("redis"), valkey) {
        ("redis", None) => {
            // SAFETY: reading an API pointer Redis filled in before OnLoad, and calling it.
            let packed = unsafe { raw::RedisModule_GetServerVersion.map(|f| f()) }?;
            // 0x00MMmmpp.
            let byte = |shift: u32| u32::try_from((packed >> shift) & 0xff).ok();
            Some((Flavor::Redis, byte(16)?, byte(8)?))
        }
        ("valkey", Some(version)) => {
            let (major, minor) = major_minor(&version)?;
            Some((Flavor::Valkey, major, minor))
        }
        _ => None,
    }
}

/// `"9.1.2"` → `(9, 1)`.
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_major_minor() {
        assert_eq!(major_minor("9.1.2"), Some((9, 1)));
        assert_eq!(major_minor("7.0"), Some((7, 0)));
        assert_eq!(major_minor("10.12.0-rc1"), Some((10, 12)));
        assert_eq!(major_minor("9"), None);
        assert_eq!(major_minor("unstable"), None);
    }
}
