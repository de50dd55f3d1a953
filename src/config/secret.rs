//! Secret flags' values are checked here, and a refusal names the flag and the rule but
//! never the value: clap's own error quotes a rejected value, and start-up errors end up in
//! logs other people read.

/// A secret flag's value parser: `rule` says what is wrong with a value, and the refusal
/// names the flag and the rule, never the value.
#[derive(Clone)]
pub struct Secret(pub fn(&str) -> Result<(), &'static str>);

impl clap::builder::TypedValueParser for Secret {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        let flag = arg
            .and_then(clap::Arg::get_long)
            .map_or_else(|| "a secret".to_string(), |long| format!("--{long}"));
        let refuse = |rule: &str| {
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("the value of {flag} is refused (not shown: it is a secret): {rule}\n"),
            )
            .with_cmd(cmd)
        };
        let value = value.to_str().ok_or_else(|| refuse("it is not UTF-8"))?;
        (self.0)(value).map_err(refuse)?;
        Ok(value.to_string())
    }
}

/// A short token can be guessed, and an empty one (`SECKILL_ADMIN_TOKEN=` left blank) could
/// never match: both are refused at start rather than run an admin API nobody meant.
pub(super) fn admin_token_rule(s: &str) -> Result<(), &'static str> {
    if s.len() < super::MIN_ADMIN_TOKEN || !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("an admin token is at least 16 visible ASCII characters");
    }
    Ok(())
}

pub(super) fn zk_auth_rule(s: &str) -> Result<(), &'static str> {
    match s.split_once(':') {
        Some((user, password)) if !user.is_empty() && !password.is_empty() => Ok(()),
        _ => Err("expected user:password"),
    }
}

/// It travels in a header: visible ASCII only (an empty key would be sent as no key).
pub fn api_key_rule(s: &str) -> Result<(), &'static str> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("an API key is one or more visible ASCII characters");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use clap::Parser;

    #[test]
    fn admin_tokens_must_be_long_and_visible() {
        let parse = |token: &str| {
            Config::try_parse_from([
                "seckill",
                "--database-url",
                "postgres://x/y",
                "--admin-token",
                token,
            ])
            .map(|c| c.admin_token)
        };
        assert!(parse("").is_err());
        assert!(parse("change-me").is_err());
        assert!(parse("sixteen chars ok").is_err(), "spaces are not visible");
        assert_eq!(
            parse("0123456789abcdef").unwrap().as_deref(),
            Some("0123456789abcdef")
        );
    }

    #[test]
    fn a_refused_secret_is_named_never_printed() {
        // Each value carries a mark no message contains.
        for (flag, value) in [
            ("--admin-token", "Zq9xShort"),
            ("--zk-auth", "Zq9xNoColon"),
            ("--payment-api-key", "Zq9x spaced key"),
        ] {
            let refused = Config::try_parse_from([
                "seckill",
                "--database-url",
                "postgres://x/y",
                flag,
                value,
            ])
            .err()
            .unwrap_or_else(|| panic!("{flag} {value:?} was accepted"));
            let printed = refused.render().to_string();
            assert!(printed.contains(flag), "{flag} is not named: {printed}");
            assert!(
                !printed.contains("Zq9x"),
                "{flag}'s value printed: {printed}"
            );
        }
    }
}
