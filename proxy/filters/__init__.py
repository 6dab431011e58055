"""The proxy's filters, one concern each; `assembly.chain` puts them in order."""
