"""Other proxies the bench runs beside ours: Kroxylicious, and a bare byte relay as the floor."""
