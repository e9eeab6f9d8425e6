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
process.stdin.on('end', () => process.exit(0))
process.stdin.on('close', () => process.exit(0))
process.stdin.resume()
