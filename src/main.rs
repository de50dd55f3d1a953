use std::process::ExitCode;

use clap::Parser;
use seckill::{config, shutdown_signal, telemetry, Application, Config};

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let args: Vec<_> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "admin") {
        return seckill::admin::main(args[1..].to_vec()).await;
    }
    let args = match config::with_secret_files(args, config::SECRETS, |v| std::env::var_os(v)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let config = Config::parse_from(args);
    telemetry::logs::init(config.log_format);

    let app = Application::build(config).await?;
    let stop = shutdown_signal();
    // On stdout, alone: scripts and tests read the port from this line.
    println!("seckill listening on http://{}", app.local_addr());
    app.run(stop).await?;
    Ok(ExitCode::SUCCESS)
}
