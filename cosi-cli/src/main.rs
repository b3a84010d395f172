//! `cosictl`: parses the command line, runs it through the library, exits with its code.

use clap::Parser;

fn main() {
    let cli = match cosi_cli::args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and --version are successes; every other parse error exits 1, like any error.
            let _ = e.print();
            std::process::exit(if e.use_stderr() { 1 } else { 0 });
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(async {
        let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
        let stop = async {
            // Without a signal handler there is nothing to wait for: never stop by signal.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let mut io = cosi_cli::session::Io::new(&mut out, &mut err).with_stop(stop);
        cosi_cli::run(cli, &mut io).await
    });
    std::process::exit(code);
}
