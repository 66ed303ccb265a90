"""What a stage, a command or a server assembles from a whole config, below the pipeline so that serving
and the CLI need no stage code: the coordinator built or loaded from the config (`coordinator`), the pool
client with its recording and budget (`pool_client`), the local pool's servers (`local_pool`)."""
