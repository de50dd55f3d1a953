use clap::Parser;
use seckill::{shutdown_signal, telemetry, Application, Config};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    telemetry::logs::init(config.log_format);

    let app = Application::build(config).await?;
    let stop = shutdown_signal();
    // On stdout, alone: scripts and tests read the port from this line.
    println!("seckill listening on http://{}", app.local_addr());
    app.run(stop).await
}
