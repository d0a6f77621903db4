"""The ``inkling-probe`` command group (placeholder, being written)."""
import click


@click.group()
def main():
    """inkling-probe: record, compare and localize numerical divergence."""
