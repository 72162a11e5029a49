"""An order pipeline on kanin and Spark: see examples/orders/README.md."""
