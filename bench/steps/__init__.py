"""What the studies' own steps run and what the page shows of them (the declarations: bench/studies/)."""
