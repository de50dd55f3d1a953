//! Secrets from files, the Docker secrets convention: each secret's variable `NAME` may
//! instead be given as `NAME_FILE`, the path of a file that holds it (one trailing newline
//! is not part of it). A secret in a file stays out of `docker inspect`, the process's
//! environment and shell history.
//!
//! The value is handed to clap as its flag, so it is checked (and refused without being
//! shown) exactly as the variable or the flag would be.

use std::ffi::OsString;

/// A secret: its variable and its flag.
pub type SecretVar = (&'static str, &'static str);

/// seckill's secrets.
pub const SECRETS: &[SecretVar] = &[
    ("DATABASE_URL", "--database-url"),
    ("SECKILL_DB_PASSWORD", "--database-password"),
    ("SECKILL_ADMIN_TOKEN", "--admin-token"),
    ("SECKILL_ZK_AUTH", "--zk-auth"),
    ("SECKILL_PAYMENT_API_KEY", "--payment-api-key"),
];

/// `args` (the command line) with `--flag=value` appended for each secret given as a file,
/// `env` reading the environment. Refused: a secret given as a file and also as its
/// variable or its flag (which one was meant?), a file that cannot be read or is empty.
pub fn with_secret_files(
    args: impl IntoIterator<Item = OsString>,
    secrets: &[SecretVar],
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<Vec<OsString>, String> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    for (var, flag) in secrets {
        let file_var = format!("{var}_FILE");
        let Some(path) = env(&file_var) else { continue };
        if env(var).is_some() {
            return Err(format!(
                "{var} and {file_var} are both set: give the secret once"
            ));
        }
        let on_command_line = args.iter().any(|a| {
            a.to_str()
                .is_some_and(|a| a == *flag || a.starts_with(&format!("{flag}=")))
        });
        if on_command_line {
            return Err(format!(
                "{flag} and {file_var} are both given: give the secret once"
            ));
        }
        let value =
            read_secret(std::path::Path::new(&path)).map_err(|e| format!("{file_var}: {e}"))?;
        args.push(format!("{flag}={value}").into());
    }
    Ok(args)
}

/// A secret file's value: its text without one trailing newline (`echo` adds one). Refused:
/// a file that cannot be read, or holds nothing.
pub fn read_secret(path: &std::path::Path) -> Result<String, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let value = text
        .strip_suffix('\n')
        .map_or(text.as_str(), |t| t.strip_suffix('\r').unwrap_or(t));
    if value.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> tempfile_path::Path {
        tempfile_path::Path::with(text)
    }

    /// A file removed when dropped (no tempfile crate for one test).
    mod tempfile_path {
        pub struct Path(pub std::path::PathBuf);
        impl Path {
            pub fn with(text: &str) -> Path {
                let path = std::env::temp_dir().join(format!(
                    "seckill-secret-{}-{}",
                    std::process::id(),
                    uuid::Uuid::new_v4()
                ));
                std::fs::write(&path, text).unwrap();
                Path(path)
            }
        }
        impl Drop for Path {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
    }

    const ONE: &[SecretVar] = &[("SECKILL_ADMIN_TOKEN", "--admin-token")];

    fn run(args: &[&str], env: &[(&str, &std::path::Path)]) -> Result<Vec<String>, String> {
        let env: Vec<(String, OsString)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_os_str().to_owned()))
            .collect();
        with_secret_files(args.iter().map(OsString::from), ONE, |name| {
            env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
        .map(|a| a.into_iter().map(|a| a.into_string().unwrap()).collect())
    }

    #[test]
    fn a_file_becomes_its_flag_without_its_newline() {
        let f = file("s3cret-token-0123456789\n");
        let args = run(&["seckill"], &[("SECKILL_ADMIN_TOKEN_FILE", &f.0)]).unwrap();
        assert_eq!(args, ["seckill", "--admin-token=s3cret-token-0123456789"]);
        let crlf = file("a\r\n");
        let args = run(&["seckill"], &[("SECKILL_ADMIN_TOKEN_FILE", &crlf.0)]).unwrap();
        assert_eq!(args, ["seckill", "--admin-token=a"]);
    }

    #[test]
    fn a_secret_given_twice_or_unreadable_is_refused() {
        let f = file("x\n");
        let both = run(
            &["seckill"],
            &[
                ("SECKILL_ADMIN_TOKEN_FILE", &f.0),
                ("SECKILL_ADMIN_TOKEN", &f.0),
            ],
        );
        assert!(both.unwrap_err().contains("both set"));
        let flag = run(
            &["seckill", "--admin-token", "y"],
            &[("SECKILL_ADMIN_TOKEN_FILE", &f.0)],
        );
        assert!(flag.unwrap_err().contains("both given"));
        let missing = std::path::Path::new("/nonexistent/secret");
        let unreadable = run(&["seckill"], &[("SECKILL_ADMIN_TOKEN_FILE", missing)]);
        assert!(unreadable.unwrap_err().contains("/nonexistent/secret"));
        let empty = file("\n");
        let empty = run(&["seckill"], &[("SECKILL_ADMIN_TOKEN_FILE", &empty.0)]);
        assert!(empty.unwrap_err().contains("is empty"));
    }

    #[test]
    fn without_files_the_command_line_is_unchanged() {
        assert_eq!(
            run(&["seckill", "--admin-token", "z"], &[]).unwrap(),
            ["seckill", "--admin-token", "z"]
        );
    }
}
