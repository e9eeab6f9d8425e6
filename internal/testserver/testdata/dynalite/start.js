// Starts dynalite in memory on a loopback port chosen by the kernel and
// prints one line, "listening <port>", once it accepts connections.
// The parent (ddblock's test harness or demo) owns this process: it exits
// when its standard input closes, so a killed parent never leaves it behind.
'use strict'
const dynalite = require('dynalite')

const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 })
server.listen(0, '127.0.0.1', () => {
  process.stdout.write('listening ' + server.address().port + '\n')
})
server.on('error', (err) => {
  process.stderr.write('dynalite: ' + err.message + '\n')
  process.exit(1)
})
// dynalite throws from a request's 'error' handler when a client aborts a
// request it is still sending (a Go client whose context ended mid-call):
// that must cost the one request, not the whole test server.
process.on('uncaughtException', (err) => {
  if (err && (err.code === 'ECONNRESET' || err.message === 'aborted')) return
  process.stderr.write('dynalite: ' + (err && err.stack || err) + '\n')
  process.exit(1)
})
process.stdin.on('end', () => process.exit(0))
process.stdin.on('close', () => process.exit(0))
process.stdin.resume()
