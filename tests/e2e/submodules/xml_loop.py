"""Library submodules reached as attributes of their package, as people write it:
`import xmlrpc.client` binds `xmlrpc`, and the loop calls `xmlrpc.client.dumps`;
`import wsgiref.headers` likewise."""
import wsgiref.headers
import xmlrpc.client

total = 0
for step in range(12):
    text = xmlrpc.client.dumps((step, step * step), methodname="train")
    total += len(text)
    headers = wsgiref.headers.Headers([("X-Step", str(step))])
    print(step, total, headers["X-Step"])
